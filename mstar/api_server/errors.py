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
from pydantic import BaseModel, ValidationError
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


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, self.param)


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def error_bytes(status: int, message: str, param: str | None = None) -> bytes:
    return json.dumps(error_body(status, message, param)).encode()


async def send_error(send: Any, status: int, message: str) -> None:
    """Answer a raw ASGI request with an error (for code below the FastAPI handlers)."""
    body = error_bytes(status, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def validation_error(exc: RequestValidationError | ValidationError) -> APIError:
    """The first problem as a 400 naming the field (``param``)."""
    err = exc.errors()[0]
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    if err.get("type") == "model_type" and not loc:
        return APIError(400, "request body must be a JSON object")
    if err.get("type") == "json_invalid":
        return APIError(400, f"malformed JSON body: {err.get('msg', 'invalid JSON')}")
    # Drop pydantic's union-branch names ("str", "list[int]") so param is the field path.
    fields = [part for part in loc if not part.startswith(("str", "list[", "int", "float"))]
    param = ".".join(fields) or None
    where = f"field '{param}'" if param else "request body"
    return APIError(400, f"invalid {where}: {err.get('msg', 'invalid value')}", param)


async def parse_body(request: Request, model: type[BaseModel]) -> Any:
    """Validate the JSON body whatever its Content-Type (curl -d sends form-urlencoded)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise validation_error(exc) from None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        err = validation_error(exc)
        return JSONResponse(err.body(), status_code=400)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        # Keeps the exception's headers: a 405 carries the route's Allow.
        return JSONResponse(error_body(exc.status_code, str(exc.detail)),
                            status_code=exc.status_code, headers=exc.headers)
