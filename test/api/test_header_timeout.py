"""MSTAR_HTTP_HEADER_TIMEOUT_S: the API server's uvicorn (``listener.uvicorn_config``, as ``mstar
serve`` runs it) closes connections whose request headers do not arrive in time, on loopback: 500
that never send them, half of them after a partial header, and a kept-alive connection after its
response; a request whose headers arrived is answered however long it takes."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
import time

import pytest
import uvicorn
from serve_helpers import hard_timeout  # noqa: F401 - autouse
from uvicorn.protocols.http.h11_impl import H11Protocol

from mstar.api_server.http.header_timeout import guarded
from mstar.api_server.http.listener import listen_socket, uvicorn_config
from mstar.settings import WorkerSettings

TIMEOUT_S = 1.0
SLACK_S = 2.0  # a loaded CI machine
CONNECTIONS = 500
PARTIAL = b"GET / HTTP/1.1\r\nHost: x\r\n"


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(TIMEOUT_S * 2)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serving(config: uvicorn.Config):
    """Serve ``config`` on a loopback port in a thread; yields (host, port)."""
    sock = listen_socket("127.0.0.1", 0)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),),
                              daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield sock.getsockname()
    server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture(scope="module")
def address():
    """``mstar serve``'s uvicorn configuration (httptools when installed)."""
    yield from _serving(uvicorn_config(app, WorkerSettings(http_header_timeout_s=TIMEOUT_S)))


@pytest.fixture(scope="module")
def h11_address():
    """The same guard on uvicorn's other HTTP/1.1 protocol, h11 (used without httptools)."""
    yield from _serving(uvicorn.Config(app, log_config=None, lifespan="off",
                                       http=guarded(H11Protocol, TIMEOUT_S)))


def _closed_by_server(sockets: list[socket.socket], until: float) -> int:
    """How many of ``sockets`` the server closed (EOF or reset) before ``until``."""
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ)
    closed = 0
    while closed < len(sockets) and time.monotonic() < until:
        for key, _ in selector.select(max(0.0, until - time.monotonic())):
            try:
                data = key.fileobj.recv(4096)
            except ConnectionError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                closed += 1
    selector.close()
    return closed


def _connect(address, first: bytes = b"") -> socket.socket:
    s = socket.create_connection(address)
    if first:
        s.sendall(first)
    return s


def test_connections_without_headers_are_closed_within_the_timeout(address):
    opened = time.monotonic()
    sockets = [_connect(address, PARTIAL if i % 2 else b"") for i in range(CONNECTIONS)]
    try:
        assert _closed_by_server(sockets, opened + TIMEOUT_S / 2) == 0  # not before the timeout
        assert _closed_by_server(sockets, time.monotonic() + TIMEOUT_S + SLACK_S) == CONNECTIONS
    finally:
        for s in sockets:
            s.close()


def test_a_slow_answer_is_not_cut_and_an_idle_kept_alive_connection_is(address):
    with _connect(address, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n") as s:
        s.settimeout(TIMEOUT_S * 2 + SLACK_S)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")  # answered after 2 header timeouts
        s.sendall(PARTIAL)  # the next request's headers never finish (keep-alive stops at data)
        assert _closed_by_server([s], time.monotonic() + TIMEOUT_S + SLACK_S) == 1


def test_the_guard_works_on_h11_too(h11_address):
    sockets = [_connect(h11_address, PARTIAL if i % 2 else b"") for i in range(20)]
    try:
        assert _closed_by_server(sockets, time.monotonic() + TIMEOUT_S + SLACK_S) == 20
    finally:
        for s in sockets:
            s.close()
    with _connect(h11_address, b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n") as s:
        s.settimeout(TIMEOUT_S * 2 + SLACK_S)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")


def test_the_default_is_bounded():
    assert 0 < WorkerSettings().http_header_timeout_s <= 60
