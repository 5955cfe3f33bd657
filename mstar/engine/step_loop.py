"""The engine's step loop: serial, or overlapped (step N+1 scheduled while step N runs).

``StepLoop.step()`` is the one loop that ``mstar.LLM``, the benchmarks and every worker run. Both
modes take every step from the scheduler's one entry point, ``Scheduler.schedule``, and hand its
immutable ``SchedulerOutput`` to ``ModelRunner.execute``, which returns a ``RunnerOutput``.

- **Serial** (``MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=0``, ``auto`` on CPU, and always with
  speculative decoding on: ``OverlapPolicy.serial_only``): schedule -> execute -> postprocess,
  all on the calling thread. Speculative decoding (``mstar.engine.speculative``) runs only here:
  a forward that verifies draft tokens is timed as the "verify" phase, the proposals as
  "propose", and each step goes to ``Speculation.observe`` (its verify gate learns from the
  step's duration, without the proposals, what a token costs).
- **Overlapped**: the forward of step N runs on a forward thread. ``step()`` returns with a step in
  flight, so the caller (a worker taking messages, say) works while the model runs. The next
  ``step()`` schedules N+1 from values while N runs (``schedule(after=N)``), waits for N, launches
  N+1, then applies N's output. N+1 is either
  - a *continuation* (the reference system's "speculative step", hence the knob's name; it is
    overlap scheduling, not speculative decoding): N's batch continued by one token for every
    request N samples, each counting N's sampled token as in flight. The runner, which runs the
    steps in order, has written that token into its persistent batch by the time N+1 runs; or
  - a *yield-away step*: a fresh ``schedule()``, which admits waiting prefills and resumes
    preempted requests, once N's output is in. The overlap policy
    (``mstar.engine.schedule.overlap_policy``) decides between them. A request that N finishes (or an
    abort) does not stop N+1: its row in N+1 is wasted and never emitted, and its blocks are freed
    once N+1 is done.

The runner's batch is touched only by the thread running its steps; the scheduler, the block
manager and the requests only by the calling thread. Every knob comes from the frozen settings;
``StepLoop.apply`` takes the loop knobs from new settings between steps (a reload), including
switching between the serial and the overlapped loop: a step in flight finishes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from threading import Event
from typing import TYPE_CHECKING

from mstar.engine.phase_timing import PhaseTimer
from mstar.engine.schedule.overlap_policy import LoopCounters

if TYPE_CHECKING:
    from mstar.engine.request.outputs import RequestOutput
    from mstar.engine.runner.model_runner import ModelRunner
    from mstar.engine.schedule.scheduler import Scheduler
    from mstar.engine.schedule.scheduler_output import RunnerOutput, SchedulerOutput
    from mstar.engine.speculative.speculation import Speculation
    from mstar.settings import WorkerSettings

Postprocess = Callable[["SchedulerOutput", "RunnerOutput"], "list[RequestOutput]"]


@dataclass
class InFlight:
    output: SchedulerOutput
    future: Future


class StepLoop:
    def __init__(self, settings: WorkerSettings, scheduler: Scheduler, runner: ModelRunner,
                 postprocess: Postprocess, timer_label: int = 0,
                 speculation: Speculation | None = None) -> None:
        self.scheduler = scheduler
        self.speculation = speculation
        self.policy = scheduler.policy
        self.runner = runner
        self.postprocess = postprocess
        self.timer_label = timer_label
        self.forward_pool: ThreadPoolExecutor | None = None
        self.timer: PhaseTimer | None = None
        self.inflight: InFlight | None = None
        # run first by the forward thread (MSTAR_CPU_BIND: it binds that thread's OpenMP team)
        self.thread_setup: Callable[[], None] | None = None
        self.apply(settings)

    @property
    def counters(self) -> LoopCounters:
        return self.policy.counters

    def apply(self, settings: WorkerSettings) -> None:
        """Take the loop knobs from ``settings``: at start, and between steps on a reload."""
        self.policy.apply(settings)
        self.launch_wait_s = settings.launch_wait_ms / 1000.0
        self.step_sync = settings.engine_step_sync
        if self.timer is None or self.timer.every != settings.phase_timing:
            self.timer = PhaseTimer(settings.phase_timing, self.timer_label,
                                    counters=lambda: asdict(self.counters))
        if self.policy.overlapped and self.forward_pool is None:  # started by the first overlap
            self.forward_pool = ThreadPoolExecutor(1, thread_name_prefix="mstar-forward",
                                                   initializer=self._start_forward_thread)

    def _start_forward_thread(self) -> None:
        if self.thread_setup is not None:
            self.thread_setup()

    @property
    def in_flight(self) -> bool:
        return self.inflight is not None

    def step(self) -> list[RequestOutput]:
        if not self.policy.overlapped and self.inflight is None:
            return self._serial_step()
        return self._overlapped_step()

    def shutdown(self) -> None:
        """Finish the step in flight (its outputs are dropped) and stop the thread."""
        if self.inflight is not None:
            self.inflight.future.result()
            self.inflight = None
        if self.forward_pool is not None:
            self.forward_pool.shutdown()

    # ---- serial ------------------------------------------------------------------------

    def _serial_step(self) -> list[RequestOutput]:
        start = time.perf_counter()
        with self.timer.phase("schedule"):
            out = self.scheduler.schedule()
        if out is None:
            return []
        verifies = out.num_drafts > 0
        forward_start = time.perf_counter()
        with self.timer.phase("verify" if verifies else "forward"):
            result = self.runner.execute(out)
        forward_s = time.perf_counter() - forward_start
        with self.timer.phase("postprocess"):
            outputs = self.postprocess(out, result)
        spec = self.speculation
        if spec is not None:
            proposing = spec.observe(out.num_tokens, time.perf_counter() - start, forward_s,
                                     verifies)
            if verifies:
                self.timer.record("propose", proposing * 1000.0)
        self.policy.launched(continuation=False)
        self._end_iteration(start, len(out))
        return outputs

    # ---- overlapped --------------------------------------------------------------------

    def _overlapped_step(self) -> list[RequestOutput]:
        step = self.inflight
        if step is None:
            self._launch_fresh()
            return []
        start = time.perf_counter()
        if self.step_sync:
            with self.timer.phase("forward"):
                step.future.result()
        with self.timer.phase("continue"):
            following = self.scheduler.schedule(after=step.output)
        with self.timer.phase("forward"):
            result = step.future.result()
        self.inflight = None
        if following is not None:
            # N+1 starts before N's outputs are applied: postprocessing overlaps the forward. A
            # request that N finishes (or an abort) costs N+1 one wasted row, never emitted.
            self._launch(following)
        with self.timer.phase("postprocess"):
            outputs = self.postprocess(step.output, result)
        if following is None and self.policy.overlapped:
            # No continuation (the policy yields, or it did not fit): a fresh step now. After a
            # reload to cap 0 nothing is in flight here, and the next step() runs serially.
            self._launch_fresh()
        self._end_iteration(start, len(step.output))
        return outputs

    def _launch(self, out: SchedulerOutput) -> None:
        """Submit the forward; wait at most MSTAR_LAUNCH_WAIT_MS for it to start (GIL throttle)."""
        started = Event()

        def forward() -> RunnerOutput:
            started.set()
            return self.runner.execute(out)

        future = self.forward_pool.submit(forward)
        with self.timer.phase("launch_wait"):
            started.wait(self.launch_wait_s)
        self.inflight = InFlight(out, future)
        self.policy.launched(out.continuation)

    def _launch_fresh(self) -> None:
        """A yield-away step: a fresh batch from the scheduler (nothing to do if it is empty)."""
        with self.timer.phase("schedule"):
            out = self.scheduler.schedule()
        if out is not None:
            self._launch(out)

    def _end_iteration(self, start: float, batch_size: int) -> None:
        self.timer.record("iteration", (time.perf_counter() - start) * 1000.0)
        self.timer.end_iteration(batch_size)
