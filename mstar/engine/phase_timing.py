"""Per-phase timing of the engine step loop, logged every N iterations (MSTAR_PHASE_TIMING)."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager

import structlog

log = structlog.get_logger(__name__)

# "continue": planning the overlapped loop's continuation; "propose" and "verify": speculative
# decoding's draft proposals (inside "schedule") and the forwards that verify drafts. "inbox" and
# "publish": a worker taking its commands and sending a step's outputs and stats (outside
# "iteration", which is the engine's step).
PHASES = ("schedule", "continue", "propose", "plan", "launch_wait", "forward", "verify",
          "postprocess", "iteration", "inbox", "publish")


def _percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))
    return sorted_values[index]


class PhaseTimer:
    """Collects durations per phase; ``every`` = 0 makes every call a no-op."""

    def __init__(self, every: int, worker: int = 0,
                 counters: Callable[[], dict[str, int]] = dict):
        self.every = every
        self.worker = worker
        self.counters = counters  # running totals logged with each summary
        self.samples: dict[str, list[float]] = defaultdict(list)
        self.batch_sizes: list[int] = []
        self.iterations = 0

    @contextmanager
    def phase(self, name: str):
        if not self.every:
            yield
            return
        start = time.perf_counter()
        try:
            yield
        finally:
            self.samples[name].append((time.perf_counter() - start) * 1000.0)

    def record(self, name: str, milliseconds: float) -> None:
        if self.every:
            self.samples[name].append(milliseconds)

    def end_iteration(self, batch_size: int) -> None:
        """Count one loop iteration; every ``every`` iterations log the summary and start over."""
        if not self.every:
            return
        self.batch_sizes.append(batch_size)
        self.iterations += 1
        if self.iterations % self.every == 0:
            self._flush()

    def _flush(self) -> None:
        fields = {}
        for name in PHASES:
            values = sorted(self.samples.get(name, ()))
            if values:
                fields[name] = {"p50_ms": round(_percentile(values, 0.5), 3),
                                "p95_ms": round(_percentile(values, 0.95), 3),
                                "mean_ms": round(statistics.fmean(values), 3)}
        log.info("phase_timing", worker=self.worker, iterations=len(self.batch_sizes),
                 batch_size_mean=round(statistics.fmean(self.batch_sizes), 2),
                 batch_size_max=max(self.batch_sizes), **self.counters(), **fields)
        self.samples.clear()
        self.batch_sizes.clear()
