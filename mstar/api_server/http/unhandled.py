"""The outermost guard: a request that ends in an unhandled exception, or that is cancelled while
the server stops, still gets a well-formed answer in OpenAI's error shape.

Before the response started: a 500 (503 when cancelled) JSON error. Mid-stream: an error event and
``data: [DONE]`` (server-sent events) or an error line (NDJSON), then the body ends. An unexpected
exception's traceback is logged once, here (nothing re-raises it to be logged again); a
cancellation is one warning line without a traceback.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from mstar.api_server.http import framing
from mstar.api_server.http.errors import error_body, send_error

log = structlog.get_logger(__name__)

INTERNAL_ERROR = "internal server error (the server log has the details)"
CANCELLED = "the server stopped before the request finished"


@dataclass
class ResponseProgress:
    """How far the response of one request got."""

    started: bool = False
    complete: bool = False
    content_type: bytes = b""

    def track(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.content_type = dict(message.get("headers", [])).get(b"content-type", b"")
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True


def stream_tail(content_type: bytes, status: int, message: str) -> bytes:
    """What ends a stream that failed midway: an error event (and [DONE]) in the stream's format."""
    body = error_body(status, message)
    if content_type.startswith(b"text/event-stream"):
        return framing.sse(body) + framing.SSE_DONE
    if content_type.startswith(b"application/x-ndjson"):
        return framing.json_line(body)
    return b""


async def finish_response(send: Any, progress: ResponseProgress, status: int, message: str) -> None:
    if progress.complete:
        return
    try:
        if not progress.started:
            await send_error(send, status, message)
        else:
            await send({"type": "http.response.body", "more_body": False,
                        "body": stream_tail(progress.content_type, status, message)})
    except OSError:  # the client is gone: nothing left to tell it
        pass


class UnhandledErrorMiddleware:
    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        progress = ResponseProgress()

        async def tracking_send(message: dict) -> None:
            progress.track(message)
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unhandled_error", method=scope["method"], path=scope["path"])
            await finish_response(send, progress, 500, INTERNAL_ERROR)
        except asyncio.CancelledError:
            # Only the server's own shutdown cancels a request; the request ends here either way.
            log.warning("request_cancelled", method=scope["method"], path=scope["path"])
            await finish_response(send, progress, 503, CANCELLED)
