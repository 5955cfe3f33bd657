"""Top-p rows without top-k: the nucleus found among the tokens within ``FLOOR`` of the row's best
probability, with neither ``topk`` nor a sort of the row (CPU ``topk`` of a wide nucleus costs
more than the rest of the step).

Per row: ``w = exp(x - max)`` (so ``w <= 1``) and its exact sum; the candidates ``w >= FLOOR``,
compacted across rows and sorted by (row, weight descending, token id); one running sum. The
nucleus is the shortest prefix of a row's candidates whose weight reaches ``top_p`` of the row's
sum; min-p drops the candidates under ``min_p``. When a row's candidates hold less than ``top_p``
of its mass and are all kept, its nucleus may go on past them: ``fits`` is False and the caller
draws that row another way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FLOOR = math.exp(-10)  # candidates: tokens at least this likely relative to the row's best


@dataclass
class Nucleus:
    """The rows' candidates, flat and sorted by (row, weight desc, id); per row its span."""

    ids: torch.Tensor  # token id of each candidate
    cum: torch.Tensor  # float64 running sum of weights over all candidates
    start: torch.Tensor  # per row: its first candidate
    kept: torch.Tensor  # per row: how many of its candidates are kept (a prefix)
    fits: torch.Tensor  # per row: the kept tokens are all among its candidates

    def kept_ids(self, row: int) -> list[int]:
        first = int(self.start[row])
        return self.ids[first : first + int(self.kept[row])].tolist()


def nucleus(x: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> Nucleus:
    """``x``: logits divided by the temperature, one row per request."""
    n = x.shape[0]
    weights = torch.exp(x - x.amax(dim=-1, keepdim=True))
    total = weights.sum(dim=-1).double()
    row, ids = (weights >= FLOOR).nonzero(as_tuple=True)  # by row, ids ascending
    w = weights[row, ids].double()
    order = (row.double() * 2 - w).sort(stable=True).indices  # row asc, weight desc, id asc
    row, ids, w = row[order], ids[order], w[order]
    count = torch.bincount(row, minlength=n)
    start = count.cumsum(0) - count
    cum = w.cumsum(0)
    before = torch.cat([cum.new_zeros(1), cum])[start]  # the running sum before each row
    local = cum - before[row]
    limit = top_p.double() * total
    keep = ((local - w) < limit[row]) & (w >= min_p.double()[row])  # a prefix of each row
    kept = torch.zeros(n, dtype=torch.int64, device=x.device).index_add_(0, row, keep.long())
    mass = local[start + count - 1]
    fits = (kept < count) | (mass >= limit) | (min_p >= FLOOR)
    return Nucleus(ids, cum, start, kept, fits)


def draw_from(nuc: Nucleus, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row: where ``uniforms`` times the kept weight falls in the running sum."""
    last = nuc.start + nuc.kept - 1
    before = torch.cat([nuc.cum.new_zeros(1), nuc.cum])[nuc.start]
    target = before + uniforms.double() * (nuc.cum[last] - before)
    pick = torch.searchsorted(nuc.cum, target, right=True)
    return nuc.ids[torch.maximum(torch.minimum(pick, last), nuc.start)]
