"""The published schema (/openapi.json): each route's responses, errors included.

Every failure is an OpenAI-shaped error (errors.py), never FastAPI's 422, so the 422 responses
FastAPI documents for typed bodies are dropped from the schema.

A server-sent-event stream (``text/event-stream``) is documented per event, as OpenAPI 3.1 reads
an event stream's ``schema``: an object whose ``data`` is either ``[DONE]`` (the last event) or
JSON text (``contentMediaType``) of a chunk object, or of an error object when the stream fails
part-way. Schemathesis checks every event of a fuzzed stream against it.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from mstar.api_server.http.error_models import ErrorResponse

ERROR_MEANINGS = {
    400: "Invalid request: `error.param` names the field (its dotted path).",
    401: "Missing or wrong API key (MSTAR_API_KEY is set).",
    403: "Not allowed here: run-time LoRA loading is off, or the path is outside MSTAR_LORA_DIR.",
    404: "Unknown model (`error.code` = model_not_found).",
    413: "Body larger than MSTAR_MAX_BODY_MB.",
    503: "Too many requests in flight, shutting down, or stopped after a fault.",
    504: "Ran longer than MSTAR_REQUEST_TIMEOUT_S.",
}
GENERATION_ERRORS = (400, 401, 404, 413, 503, 504)
REQUEST_ERRORS = (400, 401, 404, 413, 503)


def error_responses(errors: tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ErrorResponse, "description": ERROR_MEANINGS[status]}
            for status in errors}


STREAM_MODELS: dict[str, type[BaseModel]] = {}  # event payloads, added to the components
SSE_DONE = "[DONE]"


def component(model: type[BaseModel]) -> dict[str, str]:
    STREAM_MODELS[model.__name__] = model
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def sse_event_schema(chunk: type[BaseModel]) -> dict[str, Any]:
    """One event of a stream: ``data`` is [DONE], or JSON of a ``chunk`` or an error."""
    payload = {"type": "string", "contentMediaType": "application/json",
               "contentSchema": {"anyOf": [component(chunk), component(ErrorResponse)]}}
    return {"type": "object", "required": ["data"], "properties": {
        "data": {"if": {"const": SSE_DONE}, "then": True, "else": payload,
                 "description": f"JSON of a {chunk.__name__} (or of an error), then {SSE_DONE}."}}}


def documented(ok: type[BaseModel], errors: tuple[int, ...], stream_media: str | None = None,
               stream_item: type[BaseModel] | None = None) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: the success model (and stream media type, with the schema of
    each server-sent event when ``stream_item`` is its chunk model), then its errors."""
    success: dict[str, Any] = {"model": ok}
    if stream_media is not None:
        schema = sse_event_schema(stream_item) if stream_item else {"type": "string"}
        success["content"] = {stream_media: {"schema": schema}}
    return {200: success, **error_responses(errors)}


def _add_stream_models(schemas: dict[str, Any]) -> None:
    for name, model in STREAM_MODELS.items():
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(found.pop("$defs", {}))
        schemas.setdefault(name, found)


def install_openapi(app: FastAPI) -> None:
    """Build the schema once, without the 422 responses FastAPI adds and no route returns."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = schema.setdefault("components", {}).setdefault("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            _add_stream_models(schemas)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
