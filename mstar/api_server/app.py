"""The composition root: the FastAPI application wired from the server's collaborators (the engine
client, the running settings, the served model, admission, metrics) with its routes, error
handlers, admission control and the catch-all guard.

Routes find what they call on ``app.state``: ``generation`` (prompts and runs), ``gate`` (request
checks), ``running`` (the settings), ``model`` (the served model), ``speech`` (a speech model's
features and tokens, for the audio routes) and ``response_store``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST

from mstar.api_server.anthropic import routes as anthropic_routes
from mstar.api_server.audio import routes as audio_routes
from mstar.api_server.audio import speak_route
from mstar.api_server.audio.speech import SpeechModel
from mstar.api_server.context.admission import Admission
from mstar.api_server.context.metrics import Metrics
from mstar.api_server.context.running import RunningSettings
from mstar.api_server.context.served import ServedModel
from mstar.api_server.generation.engine_client import EngineClient
from mstar.api_server.generation.facade import Generation
from mstar.api_server.http.cors import install_cors
from mstar.api_server.http.errors import error_body, install_error_handlers
from mstar.api_server.http.middleware import LimitsMiddleware
from mstar.api_server.http.openapi import documented, error_responses, install_openapi
from mstar.api_server.http.unhandled import UnhandledErrorMiddleware
from mstar.api_server.native import config_routes, lora_routes, tokenize_routes
from mstar.api_server.native import generate_routes as native_routes
from mstar.api_server.openai import embedding_routes
from mstar.api_server.openai import routes as openai_routes
from mstar.api_server.openai.response_models import HealthResponse
from mstar.api_server.responses import routes as responses_routes
from mstar.api_server.responses.store import store_from
from mstar.api_server.scoring import routes as scoring_routes
from mstar.api_server.scoring.pairs import read_template
from mstar.api_server.ui.pages import PagesMiddleware, page_files
from mstar.api_server.validation.gate import RequestGate
from mstar.ipc.tracing import Tracing

ROUTERS = (openai_routes.router, responses_routes.router, anthropic_routes.router,
           embedding_routes.router, native_routes.router, tokenize_routes.router,
           config_routes.router, scoring_routes.router, audio_routes.router,
           speak_route.router, lora_routes.router)
METRICS_DOC = {200: {"description": "Prometheus text format.",
                     "content": {"text/plain": {"schema": {"type": "string"}}}}}


def build_app(client: EngineClient, tokenizer: Any, running: RunningSettings, model: ServedModel,
              admission: Admission, metrics: Metrics, processor: Any = None,
              speech: SpeechModel | None = None) -> FastAPI:
    """``processor``: a vision model's transformers processor (None: the model takes text);
    ``speech``: a speech-to-text model's (None: the audio routes answer a 400)."""
    app = FastAPI(title="mstar", version="1", docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json",
                  description="OpenAI-compatible serving (chat, completions, Responses) and "
                  "Anthropic's Messages API. Which request fields are supported, rejected or "
                  "ignored: docs/openai_api.rst and docs/anthropic_api.rst.")
    settings = running.settings
    app.state.generation = Generation(client, tokenizer, model, running, metrics, processor)
    app.state.gate = RequestGate(model, running, 0 if tokenizer is None else len(tokenizer))
    app.state.running = running
    app.state.model = model
    app.state.speech = speech
    app.state.client = client  # the run-time LoRA routes reach every replica through it
    app.state.response_store = store_from(settings)
    app.state.score_template = read_template(settings.score_template)  # rerank, score
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)

    @app.get("/health", response_model=None, responses=documented(HealthResponse, (503,)))
    async def health() -> Response:
        replicas = client.replicas  # some down: degraded; all down: a 503 that says so
        reason = admission.unavailable_reason() or replicas.unavailable()
        if reason is not None:
            return JSONResponse(error_body(503, reason), status_code=503)
        if replicas.degraded() is not None:
            return JSONResponse({"status": "degraded", "message": replicas.degraded()})
        return JSONResponse({"status": "ok"})

    @app.get("/metrics", name="metrics", response_model=None,
             responses={**METRICS_DOC, **error_responses((401,))})
    async def prometheus(request: Request) -> Response:
        metrics.update_workers(client.stats)
        metrics.update_routing(client.router.decisions, client.router.hits,
                               client.router.cached_tokens)
        metrics.update_dropped_frames(client.dropped_frames())
        metrics.in_flight.set(admission.in_flight)
        metrics.show_fingerprint(running.settings.fingerprint())
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    install_openapi(app)
    routes = [route for router in ROUTERS for route in router.routes]
    routes += [route for route in app.routes if isinstance(route, APIRoute)]
    # Spans are exported in the background; the SDK flushes them when the process exits.
    tracing = Tracing.start(settings.otlp_endpoint, "mstar-api-server")
    app.add_middleware(LimitsMiddleware, running=running, admission=admission, metrics=metrics,
                       routes=routes, tracing=tracing)
    if settings.playground:  # outside admission: the static pages load without the key
        app.add_middleware(PagesMiddleware, files=page_files())
    app.add_middleware(UnhandledErrorMiddleware)  # outside the limits
    install_cors(app, settings.cors_origins)  # the outermost: answers preflights before auth
    return app
