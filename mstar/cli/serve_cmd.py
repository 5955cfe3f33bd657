"""``mstar serve [MODEL]``: the OpenAI-compatible HTTP server over the conductor and its workers.

Settings are built and validated (every warning logged) before anything heavy happens. Then the
HTTP port is bound, and the model path resolved, before any worker starts: a port in use or a bad
path fails fast with a clear message and exit code 1.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from mstar.settings.cli_args import add_settings_arguments, settings_from_args
from mstar.settings.models import models_or_exit

if TYPE_CHECKING:
    import socket

    from mstar.settings import LoadedSettings


def add_parser(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve MODEL (the built-in model when omitted, a local HF-format "
                    "directory or .gguf file, or a Hugging Face id org/name[@revision]) over an "
                    "OpenAI-compatible HTTP API.")
    serve.add_argument("model_positional", nargs="?", metavar="MODEL", default=None,
                       help="model to serve (same as --model / MSTAR_MODEL)")
    add_settings_arguments(serve)
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import structlog

    from mstar.logging_setup import start_logging

    loaded = settings_from_args(args, overrides={"model": args.model_positional})
    start_logging(loaded)  # every settings warning and changed value, before anything heavy
    settings = loaded.settings
    log = structlog.get_logger("mstar.serve")
    models = models_or_exit(loaded)  # MSTAR_MODELS: each model's settings, checked before anything
    for name, own in models.items():  # what a model's env file added to the main warnings
        for problem in (p for p in own.problems if p not in loaded.problems):
            log.warning("model_settings_problem", model=name, problem=problem.message())

    from mstar.api_server.http.listener import ListenError, listen_socket

    try:
        sock = listen_socket(settings.host, settings.port)
    except ListenError as exc:
        log.error("listen_failed", error=str(exc))
        return 1

    with sock:  # closed on every way out; uvicorn serves on it
        if models:  # each model is resolved when it first loads
            from mstar.api_server.serve_models import serve_models

            return serve_models(loaded, models, sock)
        return _resolve_and_serve(loaded, sock, log)


def _resolve_and_serve(loaded: LoadedSettings, sock: socket.socket, log: Any) -> int:
    from mstar.models.loading.resolve import ModelError, resolve_model_dir

    settings = loaded.settings
    log.info("resolving_model", model=settings.model)
    try:
        model_dir = resolve_model_dir(settings)
    except ModelError as exc:
        log.error("model_error", error=str(exc))
        return exc.exit_code
    log.info("model_resolved", path=str(model_dir))

    from mstar.api_server.server import serve

    try:
        return serve(loaded, model_dir, sock)
    except KeyboardInterrupt:  # Ctrl-C before the server installed its own handlers
        log.info("interrupted")
        return 130
