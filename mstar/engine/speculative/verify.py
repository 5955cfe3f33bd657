"""Verification: which of a row's draft tokens the target model accepts.

The sampler samples a token at every position of a speculating row (the row's own sampling
params, a seeded request's own generator, position after position). Draft ``i`` is accepted when
the token sampled at the position before it equals it. For greedy rows this is exact match with
the argmax. For sampled rows it is rejection sampling with a point-mass draft (the n-gram
proposer's): the draft ``d`` is accepted with probability ``p(d)``, and on a rejection the token
drawn from ``p`` is, given that it is not ``d``, a draw from ``p`` with ``d`` removed and
renormalized (the residual). So every emitted token is distributed exactly as without
speculation.
"""

from __future__ import annotations

from collections.abc import Sequence


def accept(drafts: Sequence[int], sampled: Sequence[int]) -> int:
    """How many leading drafts are accepted. ``sampled`` has one token per row position (one
    more than ``drafts``); the emitted tokens are ``sampled[:accepted + 1]``."""
    assert len(sampled) == len(drafts) + 1
    n = 0
    while n < len(drafts) and sampled[n] == drafts[n]:
        n += 1
    return n
