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

The scheduler's prefill share (``schedule.prefill_share``) fits with it too: decode-only steps
by their decoding rows, and the seconds a prompt token adds beside them by its context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        otherwise). Plain Python: a few dozen bins, asked a few times a step."""
        width = max(MIN_WIDTH, tokens / 2)
        near = [(n, b) for n, b in self.bins.items() if abs(n - tokens) <= REACH * width]
        above = [(n, b) for n, b in near if n >= tokens]
        use = above if len(above) >= 2 else near
        if len(use) < 2:
            return None
        weights = [min(b.count, MEMORY) * math.exp(-0.5 * ((n - tokens) / width) ** 2)
                   for n, b in use]
        total = sum(weights)
        mean_at = sum(w * n for w, (n, _) in zip(weights, use, strict=True)) / total
        mean_s = sum(w * b.seconds for w, (_, b) in zip(weights, use, strict=True)) / total
        spread = sum(w * (n - mean_at) ** 2 for w, (n, _) in zip(weights, use, strict=True))
        slope = sum(w * (n - mean_at) * (b.seconds - mean_s)
                    for w, (n, b) in zip(weights, use, strict=True)) / spread if spread else 0.0
        slope = max(0.0, slope)
        at = mean_s + slope * (tokens - mean_at)  # the fitted line passes the weighted mean
        fastest = min(b.seconds for _, b in use)
        return Line(max(at, fastest), slope)  # no step is faster than the fastest
