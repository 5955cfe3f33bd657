"""The FastAPI application: routes, error handlers, admission control and the catch-all guard."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST

from mstar.api_server.anthropic import routes as anthropic_routes
from mstar.api_server.http.errors import error_body, install_error_handlers
from mstar.api_server.http.middleware import LimitsMiddleware
from mstar.api_server.http.openapi import documented, error_responses, install_openapi
from mstar.api_server.http.unhandled import UnhandledErrorMiddleware
from mstar.api_server.native import config_routes, tokenize_routes
from mstar.api_server.native import generate_routes as native_routes
from mstar.api_server.openai import embedding_routes
from mstar.api_server.openai import routes as openai_routes
from mstar.api_server.openai.response_models import HealthResponse
from mstar.api_server.responses import routes as responses_routes
from mstar.api_server.responses.store import store_from
from mstar.api_server.state import ServerState

ROUTERS = (openai_routes.router, responses_routes.router, anthropic_routes.router,
           embedding_routes.router, native_routes.router, tokenize_routes.router,
           config_routes.router)
METRICS_DOC = {200: {"description": "Prometheus text format.",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}}


def build_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="mstar", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json",
                  description="OpenAI-compatible serving (chat, completions, Responses) and "
                  "Anthropic's Messages API. Which request fields are supported, rejected or "
                  "ignored: docs/openai_api.rst and docs/anthropic_api.rst.")
    app.state.server = state
    app.state.response_store = store_from(state.settings)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)

    @app.get("/health", response_model=None, responses=documented(HealthResponse, (503,)))
    async def health() -> Response:
        reason = state.unavailable_reason()
        if reason is not None:
            return JSONResponse(error_body(503, reason), status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", response_model=None, responses={**METRICS_DOC, **error_responses((401,))})
    async def metrics(request: Request) -> Response:
        state.metrics.update_workers(state.client.stats)
        state.metrics.update_dropped_frames(state.client.dropped_frames())
        state.metrics.in_flight.set(state.in_flight)
        state.metrics.show_fingerprint(state.settings.fingerprint())
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    install_openapi(app)
    routes = [route for router in ROUTERS for route in router.routes]
    routes += [route for route in app.routes if isinstance(route, APIRoute)]
    app.add_middleware(LimitsMiddleware, state=state, routes=routes)
    app.add_middleware(UnhandledErrorMiddleware)  # added last: the outermost of the two
    return app
