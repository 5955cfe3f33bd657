"""Admission control in front of the routes (pure ASGI, so streaming responses pass untouched).

Order: authentication (401; the key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``),
availability (503 while draining or after a fault), the in-flight cap
(503), body size (413, from Content-Length and from the bytes actually received). Health, models,
metrics, config and the OpenAPI schema bypass the cap; health also bypasses authentication. Every
response carries the settings fingerprint header.

``mstar_requests_total`` is labelled with the route template, and one shared ``unmatched`` label
covers every path no route serves, so clients cannot grow the number of series.
"""

from __future__ import annotations

import hmac
from typing import Any

from starlette.routing import BaseRoute, Match

from mstar.api_server.context.admission import Admission
from mstar.api_server.context.metrics import Metrics
from mstar.api_server.context.running import RunningSettings
from mstar.api_server.http.deadline import admitted, reset
from mstar.api_server.http.errors import send_error

OPEN_PATHS = frozenset({"/health"})
UNCOUNTED_PATHS = frozenset({"/health", "/v1/models", "/metrics", "/v1/config", "/openapi.json"})
MODEL_PATHS = "/v1/models/"
UNMATCHED = "unmatched"
FINGERPRINT_HEADER = b"x-mstar-settings-fingerprint"


def bearer_token(authorization: bytes) -> bytes | None:
    """The credentials of an ``Authorization: Bearer <token>`` header (scheme case-insensitive)."""
    scheme, _, token = authorization.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else None


def presented_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The API key a request presents: ``Authorization: Bearer <key>`` (OpenAI's clients) or
    ``x-api-key: <key>`` (Anthropic's)."""
    given = bearer_token(headers.get(b"authorization", b""))
    if given is None and b"x-api-key" in headers:
        given = headers[b"x-api-key"].strip()
    return given


MULTIPART = b"multipart/form-data"  # the audio routes' uploads: parsed as the form they are


def as_json(scope: dict) -> dict:
    """A POST body is JSON whatever its Content-Type says (curl -d sends form-urlencoded), except
    a multipart form."""
    if scope.get("method") != "POST":
        return scope
    if dict(scope["headers"]).get(b"content-type", b"").lower().startswith(MULTIPART):
        return scope
    headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def route_label(routes: list[BaseRoute], scope: dict) -> str:
    """The template of the route serving this path (whatever the method), else UNMATCHED."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            return getattr(route, "path", UNMATCHED)
    return UNMATCHED


def with_fingerprint(send: Any, fingerprint: bytes) -> Any:
    """``send`` that adds the settings fingerprint header to the response."""

    async def send_with_header(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (FINGERPRINT_HEADER, fingerprint)]}
        await send(message)

    return send_with_header


class LimitsMiddleware:
    def __init__(self, app: Any, running: RunningSettings, admission: Admission, metrics: Metrics,
                 routes: list[BaseRoute]):
        self.app = app
        self.running = running
        self.admission = admission
        self.metrics = metrics
        self.routes = routes
        self.max_body = int(running.settings.max_body_mb * 1024 * 1024)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = dict(scope["headers"])
        settings = self.running.settings  # read per request: a reload may change them
        send = with_fingerprint(send, settings.fingerprint().encode())
        key = settings.api_key  # a reload may rotate it
        if key is not None and path not in OPEN_PATHS:
            given = presented_key(headers)
            if given is None or not hmac.compare_digest(given, key.get_secret_value().encode()):
                await send_error(send, 401, "missing or invalid API key (expected "
                                 "'Authorization: Bearer <key>' or 'x-api-key: <key>')", path)
                return
        if path in UNCOUNTED_PATHS or path.startswith(MODEL_PATHS):
            await self.app(scope, receive, send)
            return
        endpoint = route_label(self.routes, scope)
        status = 500

        async def counting_send(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._admit(as_json(scope), headers, receive, counting_send)
        finally:
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()

    async def _admit(self, scope: dict, headers: dict, receive: Any, send: Any) -> None:
        admission, settings = self.admission, self.running.settings
        reason = admission.unavailable_reason()
        if reason is not None:
            await send_error(send, 503, reason, scope["path"])
            return
        if admission.in_flight >= settings.max_concurrent_requests:
            await send_error(send, 503, "too many requests in flight (max_concurrent_requests="
                             f"{settings.max_concurrent_requests}); retry later", scope["path"])
            return
        admission.enter()
        clock = admitted()  # MSTAR_REQUEST_TIMEOUT_S counts from here
        try:
            body_receive = await self._read_body(headers, receive)
            if body_receive is None:
                await send_error(send, 413, "request body exceeds max_body_mb="
                                 f"{settings.max_body_mb:g} MiB", scope["path"])
                return
            await self.app(scope, body_receive, send)
        finally:
            reset(clock)
            admission.leave()

    async def _read_body(self, headers: dict, receive: Any) -> Any:
        """Buffer the body within the limit and replay it; None when it is too large."""
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return None
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first = message
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                return None
            if not message.get("more_body", False):
                first = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        return replay
