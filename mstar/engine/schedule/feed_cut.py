"""Where a step's row for a request that reads embedding rows (``RowFeed``: Qwen3-Omni's talker)
must end: before the first position whose row has not arrived. Position ``T + j`` (``T`` prompt
rows) reads the feed's row ``j``; a finished feed has one for every position (``pad`` after its
last), and prompt positions always have theirs. A request whose next position's row has not
arrived is not scheduled that step: it waits for its feed, as the talker waits for the thinker's
next token."""

from __future__ import annotations

from mstar.engine.request.sequence import Sequence


def feed_cut(seq: Sequence, start: int, n: int) -> int:
    """``n`` tokens of ``seq`` from ``start``, cut to the positions whose rows have arrived."""
    feed = seq.feed
    if feed is None or feed.finished:
        return n
    return max(0, min(n, seq.num_prompt_tokens + len(feed.rows) - start))
