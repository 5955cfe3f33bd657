"""What a step costs on this machine, as a function of the tokens it computes, learnt from the
engine's own steps (no knob: measured, not configured).

Each step's duration goes into a bin of its token count (a running mean that turns into an
exponential average after ``MEMORY`` steps, so the bins follow a machine whose load changes). The
cost near a step of ``T`` tokens is a least-squares line through the bins near ``T``
(preferably those of ``T`` and more tokens, where the positions a step adds go), weighted by how
often each was seen and by how close it lies to ``T`` (a bell of width ``T / 2``, at least
``MIN_WIDTH`` tokens: a bin one width away counts 0.6, two widths 0.14). Local, because a CPU
step is not one line: a few tokens are memory bound (a position is nearly free) and a batch of
them compute bound (a position costs about what a row does); bins, because a line fitted to
recent steps alone loses its slope once every step computes the same number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MEMORY = 16  # steps after which a bin's mean becomes an exponential average (1 / MEMORY)
MIN_WIDTH = 2.0  # tokens: the least width of the weights' bell
REACH = 3.0  # widths: bins farther away do not count


@dataclass
class _Bin:
    seconds: float  # the (recent) mean duration of a step of this many tokens
    count: int


@dataclass(frozen=True)
class Line:
    """The cost of a step near ``tokens`` tokens: ``seconds`` for it and ``per_token`` more for
    each token added."""

    seconds: float
    per_token: float


class StepCost:
    def __init__(self) -> None:
        self.bins: dict[int, _Bin] = {}

    def observe(self, tokens: int, seconds: float) -> None:
        """A step of ``tokens`` tokens took ``seconds``."""
        found = self.bins.get(tokens)
        if found is None:
            self.bins[tokens] = _Bin(seconds, 1)
            return
        found.count += 1
        found.seconds += (seconds - found.seconds) / min(found.count, MEMORY)

    def near(self, tokens: int) -> Line | None:
        """The cost line near a step of ``tokens`` tokens, from the bins within ``REACH``
        widths of it: those of ``tokens`` and more (where the positions a step adds go) when
        there are two, else those on both sides; None when fewer than two are near. The slope
        is at least 0 and the step's time at least the fastest bin's (noise could say
        otherwise)."""
        counts = np.array(list(self.bins), dtype=np.float64)
        width = max(MIN_WIDTH, tokens / 2)
        near = np.abs(counts - tokens) <= REACH * width
        above = near & (counts >= tokens)
        use = above if above.sum() >= 2 else near
        if use.sum() < 2:
            return None
        bins = [b for b, used in zip(self.bins.values(), use, strict=True) if used]
        counts = counts[use]
        seconds = np.array([b.seconds for b in bins])
        seen = np.array([min(b.count, MEMORY) for b in bins], dtype=np.float64)
        weights = seen * np.exp(-0.5 * ((counts - tokens) / width) ** 2)
        slope, _ = np.polyfit(counts, seconds, 1, w=np.sqrt(weights))
        slope = max(0.0, float(slope))
        mean_at = float(np.average(counts, weights=weights))
        mean_s = float(np.average(seconds, weights=weights))
        at = mean_s + slope * (tokens - mean_at)  # the fitted line passes the weighted mean
        return Line(max(at, float(seconds.min())), slope)  # no step is faster than the fastest
