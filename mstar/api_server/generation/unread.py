"""One request's engine outputs between the engine and its client, bounded in time and in size.

A client that reads a stream slowly must not hold the workers past MSTAR_REQUEST_TIMEOUT_S nor
make the API server buffer without end. So the engine's queue is not read by the response (which
waits on the client), but by a pump task of its own (``pump``), which never waits on the client:
it moves each output into ``Unread`` (what the client has not read yet), and cuts the request
(its sub-requests aborted in the workers, which free their KV blocks at once) at the deadline or
once the unread output passes MSTAR_MAX_UNREAD_OUTPUT_KB. The reader then gets the error in place
of the rest (``Unread.next``): a stream ends with a final error event as soon as its client
reads again, and nothing more is generated meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from mstar.api_server.generation.engine_client import Failure
from mstar.api_server.http.errors import APIError
from mstar.output.processor import TextOutput

ENTRY_BYTES = 32  # what an output holds per token id or logprob entry beside its text: an estimate


def cost(out: TextOutput) -> int:
    """About the bytes ``out`` holds while it waits for the client: its text, token ids and
    logprobs (each with its top alternatives), an embedding's vector and speech's audio."""
    entries = len(out.new_token_ids) + sum(1 + len(lp.top) for lp in out.logprobs or [])
    audio = 0 if out.new_audio is None else len(out.new_audio.samples)
    return len(out.new_text) + ENTRY_BYTES * entries + len(out.embedding or b"") + audio


def too_slow(max_bytes: int) -> APIError:
    return APIError(503, f"the client read the stream too slowly: more than {max_bytes // 1024} "
                    "KiB of output waited for it (MSTAR_MAX_UNREAD_OUTPUT_KB); the request was "
                    "aborted")


class Unread:
    """Outputs the pump took from the engine that the reader has not; or the error that cut the
    request, which the reader gets next, in place of what was left."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: deque[TextOutput] = deque()
        self._bytes = 0
        self._error: APIError | None = None
        self._ready = asyncio.Event()

    def put(self, out: TextOutput) -> bool:
        """Keep ``out`` for the reader; False once more than ``max_bytes`` wait."""
        self._items.append(out)
        self._bytes += cost(out)
        self._ready.set()
        return self._bytes <= self.max_bytes

    def fail(self, error: APIError) -> None:
        self._error = error
        self._ready.set()

    async def next(self, wait_s: float) -> TextOutput | None:
        """The next output; None when none came within ``wait_s``; raises the cutting error."""
        if not self._items and self._error is None:
            self._ready.clear()
            try:
                await asyncio.wait_for(self._ready.wait(), wait_s)
            except asyncio.TimeoutError:
                return None
        if self._error is not None:
            raise self._error
        out = self._items.popleft()
        self._bytes -= cost(out)
        return out


async def pump(queue: asyncio.Queue, unread: Unread, pending: set[str], deadline: float,
               on_timeout: Callable[[], APIError], abort: Callable[[list[str]], None],
               taken: Callable[[TextOutput], None]) -> None:
    """Move the engine's outputs of the sub-requests ``pending`` into ``unread`` until each
    finished; at ``deadline`` (``time.perf_counter``) or past the unread bound, abort the rest and
    fail ``unread``. ``taken``: called on each output as it arrives (metrics)."""
    while pending:
        left = deadline - time.perf_counter()
        if left <= 0:
            abort(sorted(pending))
            unread.fail(on_timeout())
            return
        if queue.empty():  # wait_for costs a task and a timer: only when there is nothing
            try:
                item = await asyncio.wait_for(queue.get(), left)
            except asyncio.TimeoutError:
                continue
        else:
            item = queue.get_nowait()
        if isinstance(item, Failure):
            unread.fail(APIError(item.status, item.message, item.param))
            return
        taken(item)
        if item.finished:
            pending.discard(item.request_id)
        if not unread.put(item):
            abort(sorted(pending))
            unread.fail(too_slow(unread.max_bytes))
            return
