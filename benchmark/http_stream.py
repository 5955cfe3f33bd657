"""The benchmarks' HTTP/1.1 client: one connection per request, the response parsed by httptools
(uvicorn's parser, llhttp) inside the connection's protocol callbacks.

A streamed body is split into lines as it arrives and each line handed to the caller's
``on_line`` in the same callback: no task wakes per chunk and no reader object sits between the
socket and the line. The client shares the machine with the server it measures, so its CPU per
token is the server's loss on a machine whose cores the engine fills: at one stream on the 2-core
VM this client takes about 0.07 ms a token, aiohttp's streaming reader about 0.13
(docs/worker_loop.rst, "Served against offline at a 5 ms step").

Timeouts: ``timeout_s`` to connect, and between two reads (a whole stream may take longer).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httptools
import msgspec

READ_BUFSIZE = 4 << 20  # the most bytes a line may hold below is twice this
MAX_LINE = 2 * READ_BUFSIZE  # a stream line can be one speech chunk's base64
MAX_ERROR_BODY = 64 << 10  # of a non-2xx answer, kept for the error message

OnLine = Callable[[bytes], None]


class HttpStatusError(Exception):
    """The server answered with a status outside 2xx."""

    def __init__(self, status: int, body: bytes):
        super().__init__(f"HTTP {status}: {body.decode(errors='replace')[:300]}")
        self.status = status


class _Exchange(asyncio.Protocol):
    """One request and its response on a connection of its own. ``on_line`` given and the status
    2xx: the body's lines (``\\n``-ended, a trailing ``\\r`` stripped) go to it as they arrive;
    otherwise the body is kept. ``done`` resolves when the response has ended."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_line: OnLine | None,
                 timeout_s: float):
        self.loop, self.on_line, self.timeout_s = loop, on_line, timeout_s
        self.done: asyncio.Future[bytes] = loop.create_future()
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.delimited = False  # the body's end is marked (length or chunked), not the close
        self.body: list[bytes] = []  # kept: a non-2xx answer, or everything without on_line
        self.kept = 0
        self.parts: list[bytes] = []  # the start of a line not yet ended
        self.held = 0
        self.last_read = loop.time()
        self.watchdog = loop.call_later(timeout_s, self._check_idle)

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.last_read = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by one of the callbacks below
            self._fail(exc.__context__ or exc)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.watchdog.cancel()
        if self.done.done():
            return
        if exc is None and self.status and not self.delimited:  # the close ends the body
            self.on_message_complete()
        else:
            self._fail(exc or ConnectionError("the connection closed before the response ended"))

    # -- httptools callbacks --

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or (name == b"transfer-encoding"
                                         and b"chunked" in value.lower()):
            self.delimited = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.on_line is None or not 200 <= self.status < 300:
            if self.kept < MAX_ERROR_BODY or self.on_line is None:
                self.body.append(body)
                self.kept += len(body)
            return
        if b"\n" not in body:
            self.parts.append(body)
            self.held += len(body)
            if self.held > MAX_LINE:
                raise ValueError(f"a stream line over {MAX_LINE} bytes")
            return
        lines = (b"".join([*self.parts, body]) if self.parts else body).split(b"\n")
        tail = lines.pop()
        self.parts, self.held = ([tail], len(tail)) if tail else ([], 0)
        for line in lines:
            self.on_line(line[:-1] if line.endswith(b"\r") else line)

    def on_message_complete(self) -> None:
        if self.done.done():
            return
        try:
            if self.parts and self.on_line is not None and 200 <= self.status < 300:
                line = b"".join(self.parts)
                self.parts = []
                self.on_line(line[:-1] if line.endswith(b"\r") else line)
        except Exception as exc:  # noqa: BLE001 -- the caller's line handler: its error ends it
            self._fail(exc)
            return
        self.watchdog.cancel()
        body = b"".join(self.body)
        if 200 <= self.status < 300:
            self.done.set_result(body)
        else:
            self.done.set_exception(HttpStatusError(self.status, body))
        if self.transport is not None:
            self.transport.close()

    # -- ending --

    def _check_idle(self) -> None:
        idle = self.loop.time() - self.last_read
        if idle >= self.timeout_s:
            self._fail(asyncio.TimeoutError(f"no data for {self.timeout_s} s"))
        else:
            self.watchdog = self.loop.call_later(self.timeout_s - idle, self._check_idle)

    def _fail(self, exc: BaseException) -> None:
        self.watchdog.cancel()
        if not self.done.done():
            self.done.set_exception(exc)
        if self.transport is not None:
            self.transport.close()


class HttpSession:
    """Sends each request on a connection of its own (``Connection: close``); ``timeout_s`` to
    connect and between reads. An async context manager, so that callers keep one per run."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s

    async def __aenter__(self) -> HttpSession:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def request(self, method: str, url: str, headers: dict[str, str],
                      body: bytes = b"", on_line: OnLine | None = None) -> bytes:
        """Send one request; with ``on_line``, a 2xx body's lines go to it as they arrive and
        b"" is returned, else the body. Raises HttpStatusError (non-2xx), OSError (connect),
        asyncio.TimeoutError, ValueError (a line over MAX_LINE), or what ``on_line`` raised."""
        parts = urlsplit(url)
        secure = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        loop = asyncio.get_running_loop()
        exchange = _Exchange(loop, on_line, self.timeout_s)
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: exchange, host, port,
                                       ssl=ssl.create_default_context() if secure else None),
                self.timeout_s)
        except BaseException:
            exchange.watchdog.cancel()
            raise
        head = [f"{method} {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close",
                f"Content-Length: {len(body)}"]
        if body:
            head.append("Content-Type: application/json")
        head += [f"{name}: {value}" for name, value in headers.items()]
        transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        try:
            return await exchange.done
        finally:
            transport.close()

    async def get_json(self, url: str, headers: dict[str, str]) -> Any:
        return msgspec.json.decode(await self.request("GET", url, headers))
