"""CORS, so that a web page on another origin can call the API from a browser
(MSTAR_CORS_ORIGINS; off when unset).

Starlette's ``CORSMiddleware`` does the work: it answers a preflight (``OPTIONS`` with
``Access-Control-Request-Method``) itself, before authentication, and adds
``Access-Control-Allow-Origin`` to the responses of the origins allowed. It is the outermost
middleware, so error responses (401, 413, 503) carry the headers too and a browser can read them.
No credentials mode: API keys travel in headers (``Authorization``, ``x-api-key``), not cookies.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

ANY_ORIGIN = "*"
PREFLIGHT_MAX_AGE_S = 600  # how long a browser may reuse a preflight's answer


def cors_origins(setting: str | None) -> list[str]:
    """The allowed origins of MSTAR_CORS_ORIGINS (a comma list; * = any); empty: CORS is off."""
    return [origin.strip() for origin in (setting or "").split(",") if origin.strip()]


def cors_options(setting: str | None) -> dict[str, Any] | None:
    """The CORS middleware's options; None when no origin is allowed (CORS is off)."""
    origins = cors_origins(setting)
    if not origins:
        return None
    return {"allow_origins": origins, "allow_methods": ["*"], "allow_headers": ["*"],
            "expose_headers": ["*"], "max_age": PREFLIGHT_MAX_AGE_S}


def install_cors(app: FastAPI, setting: str | None) -> None:
    """Add the CORS middleware when origins are allowed; call after every other middleware."""
    options = cors_options(setting)
    if options is not None:
        app.add_middleware(CORSMiddleware, **options)


def wrap_cors(app: Any, setting: str | None) -> Any:
    """A plain ASGI app (the router of several models) behind the same CORS middleware, so a
    preflight is answered before authentication and before any model is chosen or loaded."""
    options = cors_options(setting)
    return app if options is None else CORSMiddleware(app, **options)
