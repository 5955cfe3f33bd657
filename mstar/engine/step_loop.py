"""The engine's step loop: serial, or overlapped (step N+1 planned while step N runs).

``StepLoop.step()`` is the one loop that ``mstar.LLM``, the benchmarks and every worker run.

- **Serial** (``MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=0``): schedule -> prepare -> execute ->
  postprocess, all on the calling thread.
- **Overlapped**: the forward of step N runs on a forward thread. ``step()`` returns with a step in
  flight, so the caller (a worker taking messages, say) works while the model runs. The next
  ``step()`` plans N+1, waits for N, postprocesses it and launches N+1. N+1 is either
  - a *speculative step* (the reference system's name; it is overlap scheduling, not speculative
    decoding): N's batch continued by one token for every sequence N samples for, planned before
    N's tokens are known (on a planning thread with MSTAR_PRE_PLAN_SPEC) and launched with N's
    sampled tokens as its input ids; or
  - a *yield-away step*: a fresh ``schedule()``, which admits waiting prefills and resumes
    preempted requests. It is taken after MSTAR_MAX_CONSECUTIVE_SPEC_STEPS speculative steps in a
    row, when other work has waited MSTAR_SPEC_YIELD_HOLD_MS (with MSTAR_SPEC_PEEK_FOR_FAIRNESS),
    and when blocks run out. A sequence that N finishes (or an abort) does not stop N+1, which was
    launched before N's outputs were applied: its row in N+1 is wasted and never emitted, and its
    sampling row is dropped with it (see ``mstar.engine.sampling``).

Every knob comes from the frozen settings the engine was built with; ``StepLoop.apply`` takes the
loop knobs from new settings between steps (a reload), including switching between the serial and
the overlapped loop: a step in flight finishes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from threading import Event
from typing import TYPE_CHECKING

from mstar.engine.phase_timing import PhaseTimer

if TYPE_CHECKING:
    from mstar.engine.model_runner import ModelInput, ModelRunner
    from mstar.engine.outputs import RequestOutput, StepResult
    from mstar.engine.scheduler import ScheduledBatch, Scheduler

Postprocess = Callable[["ScheduledBatch", "StepResult"], "list[RequestOutput]"]


@dataclass
class LoopCounters:
    speculative_steps: int = 0
    yield_steps: int = 0
    longest_speculative_run: int = 0


@dataclass
class InFlight:
    batch: ScheduledBatch
    future: Future


class StepLoop:
    def __init__(self, settings, scheduler: Scheduler, runner: ModelRunner,
                 postprocess: Postprocess, timer_label: int = 0) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.postprocess = postprocess
        self.timer_label = timer_label
        self.pre_plan = settings.pre_plan_spec
        self.forward_pool: ThreadPoolExecutor | None = None
        self.plan_pool: ThreadPoolExecutor | None = None
        self.counters = LoopCounters()
        self.timer: PhaseTimer | None = None
        self.consecutive = 0
        self.other_work_since: float | None = None
        self.inflight: InFlight | None = None
        self.apply(settings)

    def apply(self, settings) -> None:
        """Take the loop knobs from ``settings``: at start, and between steps on a reload."""
        self.cap = settings.max_consecutive_spec_steps
        self.peek_for_fairness = settings.spec_peek_for_fairness
        self.yield_hold_s = settings.spec_yield_hold_ms / 1000.0
        self.launch_wait_s = settings.launch_wait_ms / 1000.0
        self.step_sync = settings.engine_step_sync
        if self.timer is None or self.timer.every != settings.phase_timing:
            self.timer = PhaseTimer(settings.phase_timing, self.timer_label,
                                    counters=lambda: asdict(self.counters))
        if self.cap > 0 and self.forward_pool is None:  # threads start with the first overlap
            self.forward_pool = ThreadPoolExecutor(1, thread_name_prefix="mstar-forward")
            if self.pre_plan:
                self.plan_pool = ThreadPoolExecutor(1, thread_name_prefix="mstar-plan")

    @property
    def in_flight(self) -> bool:
        return self.inflight is not None

    def step(self) -> list[RequestOutput]:
        if self.cap == 0 and self.inflight is None:
            return self._serial_step()
        return self._overlapped_step()

    def shutdown(self) -> None:
        """Finish the step in flight (its outputs are dropped) and stop the threads."""
        if self.inflight is not None:
            self.inflight.future.result()
            self.inflight = None
        for pool in (self.forward_pool, self.plan_pool):
            if pool is not None:
                pool.shutdown()

    # ---- serial ------------------------------------------------------------------------

    def _serial_step(self) -> list[RequestOutput]:
        start = time.perf_counter()
        with self.timer.phase("schedule"):
            batch = self.scheduler.schedule()
        if not batch.seqs:
            return []
        with self.timer.phase("plan"):
            model_input = self.runner.prepare(batch)
        with self.timer.phase("forward"):
            result = self.runner.execute(model_input)
        with self.timer.phase("postprocess"):
            outputs = self.postprocess(batch, result)
        self.counters.yield_steps += 1
        self._end_iteration(start, len(batch))
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
        planned = self._start_planning(step.batch)
        with self.timer.phase("forward"):
            result = step.future.result()
        if isinstance(planned, Future):
            with self.timer.phase("plan"):
                planned = planned.result()
        self.inflight = None
        if planned is not None:
            # N+1 starts before N's outputs are applied: postprocessing overlaps the forward. A
            # sequence that N finishes (or an abort) costs N+1 one wasted row, never emitted.
            self._launch(planned, speculative=True, input_ids=result.token_ids)
        with self.timer.phase("postprocess"):
            outputs = self.postprocess(step.batch, result)
        if planned is None and self.cap > 0:  # cap 0 (a reload): the loop turns serial
            self._launch_fresh()
        self._end_iteration(start, len(step.batch))
        return outputs

    def _launch(self, model_input: ModelInput, speculative: bool, input_ids=None) -> None:
        """Submit the forward; wait at most MSTAR_LAUNCH_WAIT_MS for it to start (GIL throttle)."""
        started = Event()

        def forward() -> StepResult:
            started.set()
            return self.runner.execute(model_input, input_ids)

        future = self.forward_pool.submit(forward)
        with self.timer.phase("launch_wait"):
            started.wait(self.launch_wait_s)
        self.inflight = InFlight(model_input.batch, future)
        if speculative:
            self.consecutive += 1
            self.counters.speculative_steps += 1
            self.counters.longest_speculative_run = max(self.counters.longest_speculative_run,
                                                        self.consecutive)
        else:
            self.consecutive = 0
            self.counters.yield_steps += 1

    def _launch_fresh(self) -> None:
        """A yield-away step: a fresh batch from the scheduler (nothing to do if it is empty)."""
        with self.timer.phase("schedule"):
            batch = self.scheduler.schedule()
        if not batch.seqs:
            return
        with self.timer.phase("plan"):
            model_input = self.runner.prepare(batch)
        self._launch(model_input, speculative=False)

    def _should_speculate(self) -> bool:
        if self.consecutive >= self.cap:
            return False
        if not self.peek_for_fairness:
            return True
        if not self.scheduler.can_admit():
            self.other_work_since = None
            return True
        now = time.monotonic()
        if self.other_work_since is None:
            self.other_work_since = now
        return now - self.other_work_since < self.yield_hold_s

    def _plan(self, batch: ScheduledBatch) -> ModelInput | None:
        cont = self.scheduler.schedule_continuation(batch)
        return None if cont is None else self.runner.prepare(cont)

    def _start_planning(self, batch: ScheduledBatch) -> Future | ModelInput | None:
        with self.timer.phase("speculate"):
            if not self._should_speculate():
                return None
        if self.plan_pool is not None:
            return self.plan_pool.submit(self._plan, batch)
        with self.timer.phase("plan"):
            return self._plan(batch)

    def _end_iteration(self, start: float, batch_size: int) -> None:
        self.timer.record("iteration", (time.perf_counter() - start) * 1000.0)
        self.timer.end_iteration(batch_size)
