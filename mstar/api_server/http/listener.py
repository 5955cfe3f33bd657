"""The HTTP listening socket, taken before anything heavy starts.

``mstar serve`` binds and listens on its port first, so a second server on a port in use fails in
well under a second with a clear message, instead of after loading the model. The socket is then
handed to uvicorn (``uvicorn_config``). Connections made while the workers load wait in the listen
backlog.
"""

from __future__ import annotations

import errno
import socket
from typing import Any


class ListenError(Exception):
    pass


def listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port and listening; ListenError with the reason otherwise."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Lets a restart reuse the port while old connections sit in TIME_WAIT; a live listener
        # on the port still makes bind() fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen()
    except OSError as exc:
        sock.close()
        raise ListenError(_reason(host, port, exc)) from None
    sock.set_inheritable(True)
    return sock


def _reason(host: str, port: int, exc: OSError) -> str:
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"cannot listen on {where}: the port is already in use (another server?); "
                "choose another with --port or MSTAR_PORT")
    if exc.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {where}: {exc.strerror or exc}"


def uvicorn_config(app: Any, settings: Any) -> Any:
    """How uvicorn serves ``app`` on the listening socket: no logging or lifespan of its own, and
    its HTTP/1.1 protocol (httptools when installed, else h11: uvicorn's "auto") closing
    connections whose headers do not arrive within MSTAR_HTTP_HEADER_TIMEOUT_S."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from mstar.api_server.http.header_timeout import guarded

    return uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                          timeout_graceful_shutdown=2,
                          http=guarded(AutoHTTPProtocol, settings.http_header_timeout_s))
