"""The life of ``mstar serve`` with MSTAR_MODELS: serve HTTP at once (no model is loaded before
its first request or an admin's load), unload idle models in the background, and on
SIGINT/SIGTERM drain as one model does (new requests get 503; those in flight may finish for up
to MSTAR_SHUTDOWN_TIMEOUT_S, then are cut with a 503), then stop every model's replica group.

A model whose workers fail does not stop the server: its requests fail with a 503, and the
model is unloaded once they have ended; its next request loads it again. SIGHUP is not applied
with several models (logged): restart to change settings.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import TYPE_CHECKING

import structlog
import uvloop

from mstar.api_server.model_pool import ModelPool
from mstar.api_server.model_router import ModelRouter
from mstar.api_server.server import DRAIN_POLL_S, UvicornServer, cut_requests, stop_signals

if TYPE_CHECKING:
    import socket

    from mstar.settings import LoadedSettings

log = structlog.get_logger(__name__)


def serve_models(loaded: LoadedSettings, models: dict[str, LoadedSettings],
                 sock: socket.socket) -> int:
    """Serve MSTAR_MODELS' models on the listening ``sock``; the exit code of ``mstar serve``."""
    signal.signal(signal.SIGHUP, lambda *_: log.warning(
        "reload_not_applied", reason="SIGHUP is not applied with MSTAR_MODELS; restart"))
    return uvloop.run(_serve(loaded, models, sock))


async def _serve(loaded: LoadedSettings, models: dict[str, LoadedSettings],
                 sock: socket.socket) -> int:
    from mstar.api_server.http.cors import wrap_cors
    from mstar.api_server.http.listener import uvicorn_config

    settings = loaded.settings
    loop = asyncio.get_running_loop()
    stop, force = stop_signals()
    pool = ModelPool(models, settings, stop)
    router = ModelRouter(pool, loaded, int(time.time()))
    server = UvicornServer(uvicorn_config(wrap_cors(router, settings.cors_origins), settings))
    serving = loop.create_task(server.serve(sockets=[sock]))
    reaping = loop.create_task(pool.reap())
    log.info("server_ready", url=f"http://{settings.host}:{settings.port}", models=list(models))
    try:
        stopping = loop.create_task(stop.wait())
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        crashed = serving.done()
        router.admission.drain()
        await _drain(pool, settings.shutdown_timeout_s, force)
        server.should_exit = True
        await serving
        code = 1 if crashed else 0
        log.info("server_stopped", exit_code=code, reason="stopped")
        return code
    finally:
        stop.set()
        await reaping
        await pool.close()


async def _drain(pool: ModelPool, timeout_s: float, force: asyncio.Event) -> None:
    """Give the requests in flight up to ``timeout_s`` to finish, then cut the rest (503)."""
    at_start = pool.in_flight()
    log.info("draining", in_flight=at_start, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while pool.in_flight() and time.monotonic() < deadline and not force.is_set():
        await asyncio.sleep(DRAIN_POLL_S)
    if not pool.in_flight():
        log.info("drained", finished=at_start)
        return
    cut = pool.in_flight()
    why = "a second signal" if force.is_set() else f"shutdown_timeout_s={timeout_s:g}"
    await asyncio.gather(*(cut_requests(group.admission, group.client, "server shut down "
                                        f"before the request finished ({why})")
                           for group in pool.groups.values()))
    log.warning("drain_cut", cut=cut, finished=at_start - cut, reason=why)
