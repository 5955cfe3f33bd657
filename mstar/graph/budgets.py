"""Each language-model node's share of the KV blocks, split in preflight.

A graph with several language models (a thinker and a talker) gives each its own paged KV cache;
the blocks that fit in memory are split between them by share (the talker's rows are short and
many, the thinker's long). ``split_blocks`` is the one rule: largest remainder, so the parts sum
to the whole, and every node with a share gets at least one block when there are enough.
A single-node graph gets every block: the text path is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from mstar.graph.walk_graph import WalkGraph


def split_blocks(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """``total`` blocks split by ``shares`` (non-negative, not all 0); a ValueError says why not.
    The parts sum to ``total``; a node with a positive share gets one block at least when
    ``total`` covers one for each such node."""
    if total < 0 or any(s < 0 for s in shares.values()) or not any(shares.values()):
        raise ValueError(f"cannot split {total} blocks by shares {dict(shares)}")
    whole = sum(shares.values())
    exact = {n: total * s / whole for n, s in shares.items()}
    parts = {n: int(x) for n, x in exact.items()}
    order = {n: i for i, n in enumerate(shares)}  # ties: the first node named first
    by_remainder = sorted(shares, key=lambda n: (parts[n] - exact[n], order[n]))
    for name in by_remainder[:total - sum(parts.values())]:
        parts[name] += 1
    starved = [n for n in shares if shares[n] > 0 and parts[n] == 0]
    for name in starved:  # take one from the largest part that can spare it
        donor = max(parts, key=lambda n: (parts[n], n))
        if parts[donor] > 1:
            parts[donor] -= 1
            parts[name] += 1
    return parts


def node_blocks(graph: WalkGraph, total: int,
                shares: Mapping[str, float] | None = None) -> dict[str, int]:
    """The blocks of each language-model node of ``graph``: equal shares unless ``shares`` names
    them (a ValueError names a node that is not a language model of this graph)."""
    names = [n.name for n in graph.language_models]
    given = dict(shares or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"KV shares name {', '.join(unknown)}, not a language-model node; "
                         f"this graph's: {', '.join(names)}")
    if len(names) == 1:
        return {names[0]: total}
    return split_blocks(total, {n: given.get(n, 1.0) for n in names})
