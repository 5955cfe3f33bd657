"""The published schema (/openapi.json): each route's responses, errors included.

Every failure is an OpenAI-shaped error (errors.py), never FastAPI's 422, so the 422 responses
FastAPI documents for typed bodies are dropped from the schema.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from mstar.api_server.openai.response_models import ErrorResponse

ERROR_MEANINGS = {
    400: "Invalid request: `error.param` names the field (its dotted path).",
    401: "Missing or wrong API key (MSTAR_API_KEY is set).",
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


def documented(ok: type[BaseModel], errors: tuple[int, ...], stream_media: str | None = None
               ) -> dict[int | str, dict[str, Any]]:
    """``responses=`` of a route: the success model (and stream media type), then its errors."""
    success: dict[str, Any] = {"model": ok}
    if stream_media is not None:
        success["content"] = {stream_media: {"schema": {"type": "string"}}}
    return {200: success, **error_responses(errors)}


def install_openapi(app: FastAPI) -> None:
    """Build the schema once, without the 422 responses FastAPI adds and no route returns."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            for path in schema.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = schema.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
