"""OpenAI-style error bodies, and handlers that turn every failure into one (never FastAPI's 422).

Exceptions no handler here knows end in ``unhandled.UnhandledErrorMiddleware``: a 500 in the same
shape.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    503: "service_unavailable",
    504: "timeout",
}
MAX_PATH_SHOWN = 200  # characters of an unknown path quoted back in its 404


class APIError(Exception):
    """A failure with its HTTP status; ``param`` is the dotted path of the field to blame."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param, self.code, self.kind)


def error_body(status: int, message: str, param: str | None = None, code: str | None = None,
               kind: str | None = None) -> dict[str, Any]:
    kind = kind or ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_bytes(status: int, message: str, param: str | None = None) -> bytes:
    return json.dumps(error_body(status, message, param)).encode()


ANTHROPIC_PATH = "/v1/messages"  # Anthropic's Messages API: its errors take Anthropic's shape
ANTHROPIC_ERROR_TYPES = {401: "authentication_error", 404: "not_found_error",
                         413: "request_too_large", 503: "overloaded_error", 504: "timeout_error"}


def anthropic_error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """Anthropic's error shape; ``param`` (the dotted path of the field to blame) is an extra."""
    kind = ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500
                                     else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message, "param": param}}


def is_anthropic_path(path: str) -> bool:
    return path == ANTHROPIC_PATH or path.startswith(ANTHROPIC_PATH + "/")


async def send_error(send: Any, status: int, message: str, path: str = "") -> None:
    """Answer a raw ASGI request with an error (for code below the FastAPI handlers), in the
    shape of the API the path belongs to."""
    body = (json.dumps(anthropic_error_body(status, message)).encode() if is_anthropic_path(path)
            else error_bytes(status, message))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def field_path(loc: tuple | list, body: Any) -> str | None:
    """The dotted path of the field an error location points at, following the request body.

    Pydantic puts union-branch labels ("str", "list[int]", "function-after[...]") into a
    location; those are no keys of the body, so walking the body drops exactly them.
    """
    parts: list[str] = []
    node = body
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and isinstance(part, str)
        if in_dict and part in node or (
                isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            node = node[part]
        elif not (in_dict and i == len(loc) - 1):  # else: a missing field, named by the last part
            continue
        parts.append(str(part))
    return ".".join(parts) or None


def _most_specific(errors: list[dict]) -> dict:
    """Of the errors of a union, the one that got deepest into the value (the branch meant)."""
    return max(errors, key=lambda err: len(err.get("loc", ())))


def validation_error(exc: RequestValidationError | ValidationError, body: Any) -> APIError:
    """The most specific problem as a 400 naming the field (``param``, a dotted path)."""
    err = _most_specific(list(exc.errors()))
    loc = [part for part in err.get("loc", ()) if part != "body"]
    if err.get("type") in ("model_type", "model_attributes_type", "dict_type") and not loc:
        return APIError(400, "request body must be a JSON object")
    if err.get("type") == "json_invalid":
        return APIError(400, f"malformed JSON body: {err.get('msg', 'invalid JSON')}")
    param = field_path(loc, body)
    where = f"field '{param}'" if param else "request body"
    return APIError(400, f"invalid {where}: {err.get('msg', 'invalid value')}", param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_error(exc, exc.body)
        return JSONResponse(err.body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        # Keeps the exception's headers: a 405 carries the route's Allow.
        message = str(exc.detail)
        if exc.status_code == 404:  # no route serves this path
            message = f"{request.url.path[:MAX_PATH_SHOWN]} is not served; see /openapi.json"
        body = (anthropic_error_body(exc.status_code, message)
                if is_anthropic_path(request.url.path) else error_body(exc.status_code, message))
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)
