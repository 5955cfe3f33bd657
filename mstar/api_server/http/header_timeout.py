"""Connections whose request headers do not arrive in time are closed (MSTAR_HTTP_HEADER_TIMEOUT_S).

uvicorn's HTTP/1.1 protocols (httptools and h11) start no timer when a connection opens, and the
keep-alive timer they start after a response stops at the first byte of the next request; a client
that opens connections and sends nothing, or a header a byte at a time (slowloris), would hold each
one forever. ``guarded(base, timeout_s)`` is ``base`` with a timer that runs whenever the
connection waits for a request's headers: from the moment it opens, and again once every request
received so far is answered. A request whose headers complete stops it; when it fires, the
connection is closed.

Both protocols set ``cycle`` to a new request/response cycle when a request's headers complete,
and call ``on_response_complete`` when a response has been sent; the timer keys off those two.
"""

from __future__ import annotations

import asyncio
from typing import Any


class _HeaderTimer:
    """Mixed in before a uvicorn HTTP protocol class (``guarded``)."""

    header_timeout_s: float
    cycle: Any
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _header_timer: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle the timer was started after (None: the connection's)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._start_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        if self._header_timer is not None and self.cycle is not self._waiting_after:
            self._stop_header_timer()  # a new request's headers are complete

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        # Not while a pipelined request (parsed already, ``cycle``) is still being answered.
        if self.cycle is None or self.cycle.response_complete:
            self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _start_header_timer(self) -> None:
        self._stop_header_timer()
        if self.transport.is_closing():
            return
        self._waiting_after = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout_s, self.transport.close)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None


def guarded(base: type[asyncio.Protocol], timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's protocol class ``base`` with MSTAR_HTTP_HEADER_TIMEOUT_S applied."""
    return type(f"HeaderTimed{base.__name__}", (_HeaderTimer, base), {"header_timeout_s": timeout_s})
