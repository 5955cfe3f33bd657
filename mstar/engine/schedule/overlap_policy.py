"""When the overlapped loop continues step N (a continuation) instead of a fresh schedule.

A continuation is step N+1 continuing N's batch by one token per sampled request, planned while
N runs. The reference system calls it a "speculative step" (hence the knob names
``MSTAR_MAX_CONSECUTIVE_SPEC_STEPS``, ``MSTAR_SPEC_*``), but it is overlap scheduling, not
speculative decoding. The whole policy lives here; the scheduler asks it in its one entry point
(``schedule``).

Speculative decoding runs in the serial loop only: a continuation assumes one token per row,
while a verify row emits a varying number. So an engine that speculates makes its policy with
``serial_only``, and the loop stays serial whatever the cap says, reloads included: the one
place of that rule (the settings checks decide, at start, that an explicit cap above 0 turns
speculative decoding off instead).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mstar.settings import WorkerSettings
from mstar.settings.schema import OVERLAP_CAP_ON_CUDA, SERIAL_ON_CPU


def overlap_cap(setting: int | str, device_type: str) -> int:
    """MSTAR_MAX_CONSECUTIVE_SPEC_STEPS as a number: ``auto`` is serial on CPU, where the forward
    thread's GIL contention costs more than the overlap hides, and overlapped elsewhere."""
    if setting != "auto":
        return int(setting)
    return SERIAL_ON_CPU if device_type == "cpu" else OVERLAP_CAP_ON_CUDA


@dataclass
class LoopCounters:
    continuations: int = 0  # steps that continued the one before (planned while it ran)
    fresh_steps: int = 0  # steps from a fresh schedule (serial, or the overlap yielding)
    longest_continuation_run: int = 0


class OverlapPolicy:
    """MSTAR_MAX_CONSECUTIVE_SPEC_STEPS (continuations in a row; 0: the serial loop),
    MSTAR_SPEC_PEEK_FOR_FAIRNESS and MSTAR_SPEC_YIELD_HOLD_MS, and the counts of the steps
    taken."""

    def __init__(self, settings: WorkerSettings, device_type: str,
                 serial_only: bool = False) -> None:
        self.device_type = device_type
        self.serial_only = serial_only  # speculative decoding is on
        self.counters = LoopCounters()
        self.consecutive = 0
        self.other_work_since: float | None = None
        self.apply(settings)

    def apply(self, settings: WorkerSettings) -> None:
        self.cap = (0 if self.serial_only
                    else overlap_cap(settings.max_consecutive_spec_steps, self.device_type))
        self.peek_for_fairness = settings.spec_peek_for_fairness
        self.yield_hold_s = settings.spec_yield_hold_ms / 1000.0

    @property
    def overlapped(self) -> bool:
        return self.cap > 0

    def should_continue(self, can_admit: Callable[[], bool]) -> bool:
        """Continue the running batch, or yield to a fresh schedule (other work is ready)?"""
        if self.consecutive >= self.cap:
            return False
        if not self.peek_for_fairness:
            return True
        if not can_admit():
            self.other_work_since = None
            return True
        now = time.monotonic()
        if self.other_work_since is None:
            self.other_work_since = now
        return now - self.other_work_since < self.yield_hold_s

    def launched(self, continuation: bool) -> None:
        """Count a launched step: a continuation, or a fresh (yield-away) one."""
        if continuation:
            self.consecutive += 1
            self.counters.continuations += 1
            self.counters.longest_continuation_run = max(self.counters.longest_continuation_run,
                                                         self.consecutive)
        else:
            self.consecutive = 0
            self.counters.fresh_steps += 1
