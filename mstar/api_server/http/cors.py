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


def install_cors(app: FastAPI, setting: str | None) -> None:
    """Add the CORS middleware when origins are allowed; call after every other middleware."""
    origins = cors_origins(setting)
    if not origins:
        return
    options: dict[str, Any] = {"allow_methods": ["*"], "allow_headers": ["*"],
                               "expose_headers": ["*"], "max_age": PREFLIGHT_MAX_AGE_S}
    app.add_middleware(CORSMiddleware, allow_origins=origins, **options)
