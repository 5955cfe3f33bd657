"""The n-gram proposer (prompt lookup): the tokens that followed the latest earlier occurrence of
the request's last n tokens, searched in its own prompt and output, longest n first."""

from __future__ import annotations

from collections.abc import Sequence


def propose_ngram(token_ids: Sequence[int], min_n: int, max_n: int, k: int) -> list[int]:
    """Up to ``k`` draft tokens, or none when no suffix of ``min_n`` .. ``max_n`` tokens occurs
    earlier. The latest earlier occurrence wins (it is the most likely to continue alike)."""
    length = len(token_ids)
    if k <= 0:
        return []
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = list(token_ids[length - n:])
        first = suffix[0]
        # search backwards; an occurrence must end before the suffix starts to have a follower
        for start in range(length - n - 1, -1, -1):
            if token_ids[start] == first and list(token_ids[start:start + n]) == suffix:
                follow = token_ids[start + n:start + n + k]
                return list(follow)
    return []
