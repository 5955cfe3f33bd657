"""One model of MSTAR_MODELS while it is loaded: its own replica group (a conductor and its workers,
started and stopped by the same functions as a one-model ``mstar serve``: ``server``), its engine
client and its own FastAPI app, which serves the requests routed to it (``model_router``).

``open_group`` runs the blocking parts (resolving the model, a hub download, the tokenizer) in a
thread, so the event loop keeps serving the other models while one loads.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from mstar.api_server.generation.engine_client import EngineClient
from mstar.api_server.server import (
    STARTUP_SLACK_S,
    load_front,
    preflight_problem,
    served_app,
    start_conductor,
    stop_conductor,
)
from mstar.ipc.endpoints import create_socket_dir, make_endpoints

if TYPE_CHECKING:
    from mstar.api_server.context.admission import Admission
    from mstar.settings import LoadedSettings

log = structlog.get_logger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
MIB = 1024 * 1024


class LoadError(Exception):
    """The model could not be loaded; the message says why (a request for it gets a 503)."""


@dataclass
class ModelGroup:
    name: str
    app: Any  # the model's FastAPI app
    client: EngineClient
    admission: Admission
    conductor: Any
    socket_dir: Path | None


def weights_mb(model_dir: Path) -> float:
    """What the model counts against MSTAR_MODELS_MEMORY_BUDGET_MB: its weight files' size."""
    path = Path(model_dir)
    files = [path] if path.is_file() else [p for p in path.rglob("*")
                                            if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    return sum(p.stat().st_size for p in files) / MIB


def resolve(loaded: LoadedSettings) -> Path:
    """The model's directory (a hub id is downloaded or found in the cache); LoadError."""
    from mstar.models.loading.resolve import ModelError, resolve_model_dir

    try:
        model_dir = resolve_model_dir(loaded.settings)
    except ModelError as exc:
        raise LoadError(str(exc)) from None
    problem = preflight_problem(loaded.settings, model_dir)
    if problem is not None:
        raise LoadError(problem)
    return model_dir


async def open_group(name: str, loaded: LoadedSettings, model_dir: Path,
                     stop: asyncio.Event) -> ModelGroup:
    """Start the model's replica group and wait until it is ready; LoadError on a failure,
    with nothing of it left running."""
    settings = loaded.settings
    socket_dir = create_socket_dir(settings)
    conductor = None
    try:
        endpoints = make_endpoints(settings, socket_dir)
        conductor = start_conductor(settings, endpoints)
        tokenizer, media, speech = await asyncio.to_thread(load_front, settings, model_dir)
        client = EngineClient(endpoints, conductor, tokenizer)
        try:
            ready = await client.wait_ready(settings.startup_timeout_s + STARTUP_SLACK_S, stop)
            if ready is None:
                raise LoadError("the server is stopping")
        except BaseException:
            await client.shutdown("load failed")
            client.close()
            raise
        app, _, admission = served_app(loaded, client, ready, tokenizer, media, speech, name)
        client.start()
        log.info("model_loaded", model=name, workers=ready.num_workers,
                 max_model_len=ready.max_model_len)
        return ModelGroup(name, app, client, admission, conductor, socket_dir)
    except BaseException as exc:
        if conductor is not None:
            conductor.kill()  # its workers die with it
            await asyncio.to_thread(stop_conductor, conductor)
        _remove(socket_dir)
        if isinstance(exc, Exception) and not isinstance(exc, LoadError):
            raise LoadError(str(exc) or repr(exc)) from exc
        raise


async def close_group(group: ModelGroup, reason: str) -> None:
    """Stop the model's replica group (its requests have all ended: the pool waits for that)."""
    await group.client.shutdown(reason)
    group.client.close()
    await asyncio.to_thread(stop_conductor, group.conductor)
    _remove(group.socket_dir)
    log.info("model_unloaded", model=group.name, reason=reason)


def _remove(socket_dir: Path | None) -> None:
    if socket_dir is not None:
        shutil.rmtree(socket_dir, ignore_errors=True)
