"""One request's engine outputs between the engine and its client, bounded in time and in size.

A client that reads a stream slowly must not hold the workers past MSTAR_REQUEST_TIMEOUT_S nor
make the API server buffer without end. So the engine's outputs are not taken by the response
(which waits on the client), but by a ``Pump``, which never waits on the client: the engine client
hands it each output as it routes it (on the event loop: no task and no wait per output), it moves
the output into ``Unread`` (what the client has not read yet), and it cuts the request (its
sub-requests aborted in the workers, which free their KV blocks at once) at the deadline (one
timer) or once the unread output passes MSTAR_MAX_UNREAD_OUTPUT_KB. The reader then gets the error
in place of the rest (``Unread.next``): a stream ends with a final error event as soon as its
client reads again, and nothing more is generated meanwhile.
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
        self._items: deque[tuple[TextOutput, int]] = deque()  # each output with its cost
        self._bytes = 0
        self._error: APIError | None = None
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits

    def put(self, out: TextOutput) -> bool:
        """Keep ``out`` for the reader; False once more than ``max_bytes`` wait."""
        size = cost(out)
        self._items.append((out, size))
        self._bytes += size
        self._wake()
        return self._bytes <= self.max_bytes

    def fail(self, error: APIError) -> None:
        self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self, wait_s: float | None) -> TextOutput | None:
        """The next output; None when none came within ``wait_s`` (None: wait for one, or for the
        error); raises the cutting error."""
        if not self._items and self._error is None:
            # one bare future per wait (an asyncio.Event adds a waiter list and a clear per output)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                if wait_s is None:  # wait_for costs a task and a timer: only with a limit
                    await self._waiter
                else:
                    try:
                        await asyncio.wait_for(self._waiter, wait_s)
                    except asyncio.TimeoutError:
                        return None
            finally:
                self._waiter = None
        if self._error is not None:
            raise self._error
        out, size = self._items.popleft()
        self._bytes -= size
        return out


class Pump:
    """Takes the outputs of one HTTP request's sub-requests (``pending``) into ``unread`` until
    each finished (``put_nowait``: the engine client's sink, called as it routes them); at
    ``deadline`` (``time.perf_counter``) or past the unread bound, aborts the rest and fails
    ``unread``. ``taken``: called on each output as it arrives (metrics). ``close`` when the
    request ends."""

    def __init__(self, unread: Unread, pending: set[str], deadline: float,
                 on_timeout: Callable[[], APIError], abort: Callable[[list[str]], None],
                 taken: Callable[[TextOutput], None]) -> None:
        self.unread = unread
        self.pending = pending
        self.on_timeout = on_timeout
        self.abort = abort
        self.taken = taken
        left = max(0.0, deadline - time.perf_counter())
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            left, self._expire)

    def put_nowait(self, item: TextOutput | Failure) -> None:
        if self._timer is None:  # cut, failed or finished: nothing more is taken
            return
        if isinstance(item, Failure):
            self.unread.fail(APIError(item.status, item.message, item.param))
            self.close()
            return
        self.taken(item)
        if item.finished:
            self.pending.discard(item.request_id)
        if not self.unread.put(item):
            self._cut(too_slow(self.unread.max_bytes))
        elif not self.pending:
            self.close()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        self._cut(self.on_timeout())

    def _cut(self, error: APIError) -> None:
        self.abort(sorted(self.pending))
        self.unread.fail(error)
        self.close()
