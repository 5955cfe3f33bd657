"""The worker's step loop: step N+1 is built while step N runs.

The forward of step N runs on an executor thread. Meanwhile the main thread takes messages and
builds step N+1:

- a *speculative* step assumes N's outputs continue the same batch: every sequence N samples for
  gets one more decode token, whose input id is N's sampled token. Its blocks, positions and slots
  are planned before N finishes (on a planning thread with MSTAR_PRE_PLAN_SPEC).
- a *yield-away* step takes a fresh batch from the scheduler, which admits waiting prefills and
  resumes preempted requests. It is taken after MSTAR_MAX_CONSECUTIVE_SPEC_STEPS speculative steps
  in a row, when other work has been ready for MSTAR_SPEC_YIELD_HOLD_MS (with
  MSTAR_SPEC_PEEK_FOR_FAIRNESS), when blocks run out, and whenever N's outputs invalidate the plan
  (a sequence finished or was aborted): the plan is dropped and nothing of it is emitted. With a
  cap of 0 every step is a yield-away step, a serial loop.

Every knob comes from the frozen settings the Worker was built with.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from threading import Event
from typing import TYPE_CHECKING, Any

import structlog

from mstar.worker.phase_timing import PhaseTimer

if TYPE_CHECKING:
    from mstar.engine.model_runner import ModelInput
    from mstar.engine.scheduler import ScheduledBatch

log = structlog.get_logger(__name__)

IDLE_POLL_MS = 100


@dataclass
class InFlight:
    batch: ScheduledBatch
    future: Future


@dataclass
class LoopCounters:
    speculative_steps: int = 0
    yield_steps: int = 0
    dropped_plans: int = 0
    longest_speculative_run: int = 0


class StepLoop:
    def __init__(self, worker: Any):
        settings = worker.settings
        self.worker = worker
        self.engine = worker.engine
        self.cap = settings.max_consecutive_spec_steps
        self.peek_for_fairness = settings.spec_peek_for_fairness
        self.yield_hold_s = settings.spec_yield_hold_ms / 1000.0
        self.launch_wait_s = settings.launch_wait_ms / 1000.0
        self.step_sync = settings.engine_step_sync
        self.forward_pool = ThreadPoolExecutor(1, thread_name_prefix="mstar-forward")
        self.plan_pool = (ThreadPoolExecutor(1, thread_name_prefix="mstar-plan")
                          if settings.pre_plan_spec else None)
        self.counters = LoopCounters()
        self.timer = PhaseTimer(settings.phase_timing, worker.index,
                                counters=lambda: asdict(self.counters))
        self.consecutive = 0
        self.other_work_since: float | None = None
        self.deferred_aborts: list[str] = []
        self.inflight: InFlight | None = None
        self.running = True

    # ---- messages ----------------------------------------------------------------------

    def take_messages(self, timeout_ms: int) -> None:
        for msg in self.worker.channel.receive(timeout_ms):
            if not self.worker.handle(msg, defer_aborts=self.deferred_aborts):
                self.running = False

    def apply_deferred_aborts(self) -> None:
        if self.deferred_aborts:
            self.worker.abort(self.deferred_aborts)
            self.deferred_aborts = []

    # ---- launching ---------------------------------------------------------------------

    def launch(self, model_input: ModelInput, speculative: bool,
               input_ids: Any = None) -> None:
        """Submit the forward; wait at most MSTAR_LAUNCH_WAIT_MS for it to start (GIL throttle)."""
        started = Event()
        runner = self.engine.model_runner

        def forward():
            started.set()
            if input_ids is not None:
                model_input.input_ids = input_ids
            return runner.execute(model_input)

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

    def launch_fresh(self) -> None:
        """A yield-away step: a fresh batch from the scheduler (nothing to do if it is empty)."""
        with self.timer.phase("schedule"):
            batch = self.engine.scheduler.schedule()
        if not batch.seqs:
            self.inflight = None
            return
        with self.timer.phase("plan"):
            model_input = self.engine.model_runner.prepare(batch)
        self.launch(model_input, speculative=False)

    # ---- speculation -------------------------------------------------------------------

    def should_speculate(self) -> bool:
        if self.cap == 0 or self.consecutive >= self.cap:
            return False
        if not self.peek_for_fairness:
            return True
        if self.engine.num_waiting() == 0:
            self.other_work_since = None
            return True
        now = time.monotonic()
        if self.other_work_since is None:
            self.other_work_since = now
        return now - self.other_work_since < self.yield_hold_s

    def plan_speculative(self, batch: ScheduledBatch) -> ModelInput | None:
        """Plan N+1 = one more token for every sequence N samples for; None if blocks run out."""
        return self.engine.model_runner.prepare_continuation(batch, self.engine.block_manager)

    def start_planning(self, batch: ScheduledBatch) -> Future | ModelInput | None:
        with self.timer.phase("speculate"):
            if not self.should_speculate():
                return None
        if self.plan_pool is not None:
            return self.plan_pool.submit(self.plan_speculative, batch)
        with self.timer.phase("plan"):
            return self.plan_speculative(batch)

    @staticmethod
    def plan_still_valid(plan: ModelInput) -> bool:
        """N's outputs invalidate the plan when one of its sequences finished or was aborted."""
        return not any(seq.is_finished for seq in plan.batch.seqs)

    # ---- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        try:
            while self.running:
                self.iterate()
        finally:
            if self.inflight is not None:
                self.inflight.future.result()
            self.forward_pool.shutdown()
            if self.plan_pool is not None:
                self.plan_pool.shutdown()

    def iterate(self) -> None:
        if self.inflight is None:
            busy = self.engine.has_unfinished_requests()
            self.take_messages(0 if busy else IDLE_POLL_MS)
            self.apply_deferred_aborts()
            if self.running and self.engine.has_unfinished_requests():
                self.launch_fresh()
            self.worker.report_stats()
            return
        iteration_start = time.perf_counter()
        step = self.inflight
        if self.step_sync:
            with self.timer.phase("forward"):
                step.future.result()
        self.take_messages(0)
        planned = self.start_planning(step.batch) if self.running else None
        with self.timer.phase("forward"):
            tokens = step.future.result()
        if isinstance(planned, Future):
            with self.timer.phase("plan"):
                planned = planned.result()
        with self.timer.phase("postprocess"):
            outputs = self.engine.postprocess(step.batch, tokens)
        self.apply_deferred_aborts()
        self.inflight = None
        if planned is not None and self.plan_still_valid(planned):
            self.launch(planned, speculative=True, input_ids=tokens)
        else:
            if planned is not None:
                self.counters.dropped_plans += 1
            if self.running:
                self.launch_fresh()
        self.worker.publish(outputs)
        self.worker.report_stats()
        self.timer.record("iteration", (time.perf_counter() - iteration_start) * 1000.0)
        self.timer.end_iteration(len(step.batch))
