"""The n-gram proposer (prompt lookup): the tokens that followed the latest earlier occurrence of
the request's last n tokens, searched in its own prompt and output, longest n first.

Each request keeps an index from every n-gram of its tokens to where it last ended, grown by the
tokens added since the last proposal, so a proposal costs ``max_n - min_n + 1`` lookups plus the
new tokens' n-grams, not a scan of the whole sequence (which a long prompt would make the
dominant cost of a CPU step).
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    """One request's n-grams (``min_n`` .. ``max_n`` tokens), each mapped to the end of its
    latest occurrence that has a follower (an end before the last token)."""

    def __init__(self, min_n: int, max_n: int) -> None:
        self.min_n = min_n
        self.max_n = max_n
        self.last_end: dict[tuple[int, ...], int] = {}
        self.indexed = 0  # n-grams ending at or before this are in

    def propose(self, token_ids: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens, or none when no suffix of ``min_n`` .. ``max_n`` tokens
        occurs earlier. The latest earlier occurrence wins (it is the most likely to continue
        alike). ``token_ids`` only grows between calls."""
        length = len(token_ids)
        if k <= 0:
            return []
        for end in range(self.indexed + 1, length):  # ends with a follower: at most length - 1
            for n in range(self.min_n, min(self.max_n, end) + 1):
                self.last_end[tuple(token_ids[end - n:end])] = end
        self.indexed = max(self.indexed, length - 1)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            end = self.last_end.get(tuple(token_ids[length - n:]))
            if end is not None:
                return list(token_ids[end:end + k])
        return []
