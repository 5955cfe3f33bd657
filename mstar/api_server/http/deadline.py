"""MSTAR_REQUEST_TIMEOUT_S counts from a request's admission, for the whole request: fetching and
decoding its images, then generating.

The admission middleware marks the moment (``admitted``) in a context variable, which every task
the request's handling starts inherits; whatever waits on the request's behalf asks how long is
left (``seconds_left``). Outside a request (a unit test calling a route's helpers) the whole
timeout is left.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token

from mstar.api_server.http.errors import APIError

_ADMITTED: ContextVar[float | None] = ContextVar("mstar_request_admitted", default=None)


def admitted() -> Token:
    """Mark the current request admitted now; ``reset`` the token when it is done."""
    return _ADMITTED.set(time.monotonic())


def reset(token: Token) -> None:
    _ADMITTED.reset(token)


def seconds_left(timeout_s: float) -> float:
    """Of the request's timeout, what is left now (may be negative)."""
    start = _ADMITTED.get()
    return timeout_s if start is None else timeout_s - (time.monotonic() - start)


def timed_out(timeout_s: float, during: str = "") -> APIError:
    return APIError(504, f"request timed out after request_timeout_s={timeout_s:g}{during}")
