"""The HTTP front of a server of several models (MSTAR_MODELS): each request goes to its model's
own app (``model_group``), by its ``model`` field, through the pool (``model_pool``).

A request is authenticated here first (the main settings' keys), so no unauthenticated request
can load a model; the model's app then applies everything it applies with one model (its
settings, scopes, limits, validation). Its body is read once, within MSTAR_MAX_BODY_MB, and
replayed to the model's app.

- ``model`` picks the model: a name of MSTAR_MODELS, or one of a model's aliases
  (MSTAR_SERVED_MODEL_NAMES) or LoRA adapters (MSTAR_LORA_MODULES) in its settings. Absent, and
  on every path without a JSON body (the playground, /openapi.json, a multipart upload, GET
  /v1/responses/{id}): the first model listed. Another name: a 404 ``model_not_found``.
- ``keep_alive`` (Ollama's) sets how long the model stays loaded once idle.
- Served here, over every model: /health, /metrics (the pool's gauges), /v1/models (each model
  with its ``state``), /v1/config (with ``models``: each one's settings and fingerprint) and the
  admin routes POST /v1/admin/models/{name}/load and /unload (scope: admin).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST

from mstar.api_server.context.admission import Admission
from mstar.api_server.context.keep_alive import keep_alive_seconds
from mstar.api_server.http.errors import anthropic_error_body, error_body, is_anthropic_path
from mstar.api_server.http.keys_auth import identify, required_scope
from mstar.api_server.http.middleware import MULTIPART
from mstar.api_server.model_pool import ModelPool, Unavailable
from mstar.settings.knobs.lora import parse_lora_modules
from mstar.settings.models import models_view
from mstar.settings.records import settings_records

if TYPE_CHECKING:
    from mstar.settings import LoadedSettings

ADMIN_PREFIX = "/v1/admin/models/"
ADMIN_ACTIONS = ("load", "unload")
MODELS_PATH, MODEL_PREFIX = "/v1/models", "/v1/models/"
OWN_PATHS = frozenset({"/health", "/metrics", "/v1/config", MODELS_PATH})


def model_names(name: str, loaded: LoadedSettings) -> list[str]:
    """The names a request's ``model`` may use for this model: its own, its aliases and its
    LoRA adapters (those given at start)."""
    settings = loaded.settings
    aliases = [a.strip() for a in (settings.served_model_names or "").split(",") if a.strip()]
    return [name, *aliases, *parse_lora_modules(settings.lora_modules)]


async def send_json(send: Any, status: int, body: Any,
                    headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    kind = b"application/json" if not isinstance(body, bytes) else CONTENT_TYPE_LATEST.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})


async def send_failure(send: Any, path: str, status: int, message: str, param: str | None = None,
                       code: str | None = None, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """An error in the shape of the API the path belongs to (OpenAI's or Anthropic's)."""
    body = (anthropic_error_body(status, message, param) if is_anthropic_path(path)
            else error_body(status, message, param, code,
                            "invalid_request_error" if status == 404 else None))
    await send_json(send, status, body, headers)


class ModelRouter:
    def __init__(self, pool: ModelPool, loaded: LoadedSettings, created: int) -> None:
        self.pool = pool
        self.loaded = loaded  # the main settings: keys, body limit
        self.created = created  # /v1/models' ``created`` (stable)
        self.default = next(iter(pool.models))
        self.owners = {alias: name for name, settings in reversed(pool.models.items())
                       for alias in model_names(name, settings)}
        self.admission = Admission(lambda: None)  # only its draining flag and count
        self.max_body = int(loaded.settings.max_body_mb * 1024 * 1024)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path, settings = scope["path"], self.loaded.settings
        if path != "/health":
            identity = identify(dict(scope["headers"]), settings, self.loaded.keys)
            if identity is None:
                await send_failure(send, path, 401, "missing or invalid API key (expected "
                                   "'Authorization: Bearer <key>' or 'x-api-key: <key>')")
                return
            needed = required_scope(path)
            if needed is not None and needed not in identity.scopes:
                await send_failure(send, path, 403, f"key '{identity.name}' lacks the "
                                   f"'{needed}' scope")
                return
        if path in OWN_PATHS or path.startswith((MODEL_PREFIX, ADMIN_PREFIX)):
            await self._own(scope, path, send)
            return
        reason = self.admission.unavailable_reason()
        if reason is not None:
            await send_failure(send, path, 503, reason)
            return
        self.admission.enter()
        try:
            await self._forward(scope, path, receive, send)
        finally:
            self.admission.leave()

    async def _forward(self, scope: dict, path: str, receive: Any, send: Any) -> None:
        body, replay = await self._read_body(receive)
        if body is None:
            await send_failure(send, path, 413, "request body exceeds max_body_mb="
                               f"{self.loaded.settings.max_body_mb:g} MiB")
            return
        fields = _json_fields(scope, body)
        model = fields.get("model")
        name = self.owners.get(model) if isinstance(model, str) else self.default
        if name is None:
            await send_failure(send, path, 404, f"The model `{model}` does not exist; this "
                               f"server serves: {', '.join(self.owners)}", "model",
                               "model_not_found")
            return
        try:
            keep_alive = keep_alive_seconds(fields.get("keep_alive"))
        except ValueError as exc:
            await send_failure(send, path, 400, str(exc), "keep_alive")
            return
        try:
            group = await self.pool.acquire(name, keep_alive)
        except Unavailable as exc:
            await send_failure(send, path, 503, str(exc),
                               headers=[(b"retry-after", str(exc.retry_after_s).encode())])
            return
        try:
            await group.app(scope, replay, send)
        finally:
            self.pool.release(name)

    async def _read_body(self, receive: Any) -> tuple[bytes | None, Any]:
        """The whole body (None past the limit) and a ``receive`` that replays it."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                return None, receive
            more = message.get("more_body", False)
        body, sent = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return body, replay

    async def _own(self, scope: dict, path: str, send: Any) -> None:
        """The routes served over every model."""
        if path == "/health":
            reason = self.admission.unavailable_reason()
            await send_json(send, 503 if reason else 200,
                            error_body(503, reason) if reason else {"status": "ok"})
        elif path == "/metrics":
            await send_json(send, 200, self.pool.metrics.render())
        elif path == MODELS_PATH:
            await send_json(send, 200, {"object": "list",
                                        "data": [self._card(n) for n in self.pool.models]})
        elif path.startswith(MODEL_PREFIX):
            name = self.owners.get(path[len(MODEL_PREFIX):])
            if name is None:
                await send_failure(send, path, 404, f"The model `{path[len(MODEL_PREFIX):]}` "
                                   "does not exist", "model", "model_not_found")
                return
            await send_json(send, 200, self._card(name))
        elif path == "/v1/config":
            await send_json(send, 200, {
                "object": "config", "fingerprint": self.loaded.settings.fingerprint(),
                "settings": settings_records(self.loaded), "models": models_view(self.pool.models)})
        else:
            await self._admin(scope, path, send)

    def _card(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "mstar",
                "root": self.pool.models[name].settings.model, "parent": None,
                "state": self.pool.state[name].state}

    async def _admin(self, scope: dict, path: str, send: Any) -> None:
        name, _, action = path[len(ADMIN_PREFIX):].rpartition("/")
        if scope["method"] != "POST" or action not in ADMIN_ACTIONS:
            await send_failure(send, path, 404, f"no route {scope['method']} {path[:200]}; the "
                               "admin routes are POST /v1/admin/models/{name}/load and /unload")
            return
        if name not in self.pool.models:
            await send_failure(send, path, 404, f"The model `{name}` does not exist", "model",
                               "model_not_found")
            return
        try:
            if action == "load":
                await self.pool.load(name)
            else:
                await self.pool.unload(name, "admin")
        except Unavailable as exc:
            await send_failure(send, path, 503, str(exc),
                               headers=[(b"retry-after", str(exc.retry_after_s).encode())])
            return
        await send_json(send, 200, self._card(name))


def _json_fields(scope: dict, body: bytes) -> dict:
    """The JSON body's top-level fields ({} for no body, a form or malformed JSON: the model's
    app answers those)."""
    if dict(scope["headers"]).get(b"content-type", b"").lower().startswith(MULTIPART):
        return {}
    try:
        fields = json.loads(body) if body else {}
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}
