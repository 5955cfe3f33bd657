"""Admission control in front of the routes (pure ASGI, so streaming responses pass untouched).

Order: authentication (401; the key as ``Authorization: Bearer <key>`` or ``x-api-key: <key>``,
matched by ``keys_auth``), the key's scope (403), availability (503 while draining or after a
fault), the in-flight cap (503), the key's own limits (429 with Retry-After: ``quota``), body size
(413, from Content-Length and from the bytes actually received). Health, models, metrics, config
and the OpenAPI schema bypass the cap and the key's limits; health also bypasses authentication.
Every response carries the settings fingerprint header. An admitted request's ``Caller`` (its
identity, quotas, metrics and span) is current while the routes run.

``mstar_requests_total`` is labelled with the route template, and one shared ``unmatched`` label
covers every path no route serves, so clients cannot grow the number of series.
"""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute, Match

from mstar.api_server.context.admission import Admission
from mstar.api_server.context.caller import Caller, Identity, enter_caller, leave_caller
from mstar.api_server.context.metrics import Metrics
from mstar.api_server.context.quota import Quotas
from mstar.api_server.context.running import RunningSettings
from mstar.api_server.http.deadline import admitted, reset
from mstar.api_server.http.errors import send_error
from mstar.api_server.http.keys_auth import identify, required_scope
from mstar.api_server.http.refusals import RATE_LIMIT_CODE, retry_headers, send_refusal
from mstar.api_server.http.request_span import RequestSpan
from mstar.ipc.tracing import Tracing

OPEN_PATHS = frozenset({"/health"})
UNCOUNTED_PATHS = frozenset({"/health", "/v1/models", "/metrics", "/v1/config", "/openapi.json"})
MODEL_PATHS = "/v1/models/"
UNMATCHED = "unmatched"
FINGERPRINT_HEADER = b"x-mstar-settings-fingerprint"


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


def with_headers(send: Any, headers: list[tuple[bytes, bytes]]) -> Any:
    """``send`` that adds ``headers`` to the response."""

    async def send_with_headers(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return send_with_headers


class LimitsMiddleware:
    def __init__(self, app: Any, running: RunningSettings, admission: Admission, metrics: Metrics,
                 routes: list[BaseRoute], tracing: Tracing | None = None):
        self.app = app
        self.running = running
        self.admission = admission
        self.metrics = metrics
        self.routes = routes
        self.tracing = tracing  # MSTAR_OTLP_ENDPOINT (not reloadable)
        self.quotas = Quotas()
        self.max_body = int(running.settings.max_body_mb * 1024 * 1024)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        headers = dict(scope["headers"])
        settings = self.running.settings  # read per request: a reload may change them
        send = with_headers(send, [(FINGERPRINT_HEADER, self.running.fingerprint.encode())])
        identity = None
        if path not in OPEN_PATHS:  # a reload may rotate the keys
            identity = identify(headers, settings, self.running.keys)
            if identity is None:
                await send_error(send, 401, "missing or invalid API key (expected "
                                 "'Authorization: Bearer <key>' or 'x-api-key: <key>')", path)
                return
            needed = required_scope(path)
            if needed is not None and needed not in identity.scopes:
                await send_refusal(send, 403, f"key '{identity.name}' lacks the '{needed}' "
                                   "scope", path, "permission_error")
                return
        if identity is None or path in UNCOUNTED_PATHS or path.startswith(MODEL_PATHS):
            await self.app(scope, receive, send)
            return
        endpoint = route_label(self.routes, scope)
        status = 500

        async def counting_send(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        span = None if self.tracing is None else RequestSpan(self.tracing, scope, headers,
                                                               endpoint, identity.name)
        try:
            await self._admit(as_json(scope), headers, receive, counting_send,
                              Caller(identity, self.quotas, self.metrics, span))
        finally:
            self.metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()
            self.metrics.key_requests.labels(key=identity.name, status=str(status)).inc()
            if span is not None:
                span.end(status)

    async def _admit(self, scope: dict, headers: dict, receive: Any, send: Any,
                     caller: Caller) -> None:
        admission, settings = self.admission, self.running.settings
        reason = admission.unavailable_reason()
        if reason is not None:
            await send_error(send, 503, reason, scope["path"])
            return
        if admission.in_flight >= settings.max_concurrent_requests:
            await send_error(send, 503, "too many requests in flight (max_concurrent_requests="
                             f"{settings.max_concurrent_requests}); retry later", scope["path"])
            return
        key = caller.identity.key
        if key is not None:
            if not await self._take_quota(caller.identity, scope["path"], send):
                return
            send = with_headers(send, self.quotas.usage(key).headers(key))
        admission.enter()
        clock = admitted()  # MSTAR_REQUEST_TIMEOUT_S counts from here
        current = enter_caller(caller)
        try:
            body_receive = await self._read_body(headers, receive)
            if body_receive is None:
                await send_error(send, 413, "request body exceeds max_body_mb="
                                 f"{settings.max_body_mb:g} MiB", scope["path"])
                return
            await self.app(scope, body_receive, send)
        finally:
            leave_caller(current)
            reset(clock)
            admission.leave()
            if key is not None:
                self.quotas.release(key)

    async def _take_quota(self, identity: Identity, path: str, send: Any) -> bool:
        """Admit one request of a key with limits; False after answering 429."""
        key = identity.key
        refusal = self.quotas.admit(key)
        if refusal is None:
            return True
        self.metrics.key_rate_limited.labels(key=identity.name, limit=refusal.limit).inc()
        kind = "tokens" if refusal.limit == "tokens" else "requests"
        await send_refusal(send, 429, refusal.message, path, kind,
                           [*retry_headers(refusal), *self.quotas.usage(key).headers(key)],
                           RATE_LIMIT_CODE)
        return False

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
