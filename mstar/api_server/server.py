"""The life of ``mstar serve`` after settings are built: start the conductor, wait until every
worker is ready, serve HTTP, then drain and stop everything (or fail fast on a fault).

Signals: the first SIGINT/SIGTERM starts a drain (new requests get 503, in-flight ones may finish
for up to shutdown_timeout_s); a second one stops at once. A worker fault fails pending requests
with 503 and exits non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn
import uvloop

from mstar.api_server.engine_client import EngineClient, StartupError
from mstar.conductor.process import conductor_main
from mstar.ipc.endpoints import create_socket_dir, make_endpoints
from mstar.ipc.lifecycle import start_child

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

CONDUCTOR_STOP_TIMEOUT_S = 20.0
FAULT_FLUSH_S = 0.5
STARTUP_SLACK_S = 10.0


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve`` decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def load_tokenizer(model_dir: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def serve(settings: WorkerSettings, model_dir: Path) -> int:
    """Run the whole serving stack; the exit code of ``mstar serve``."""
    tokenizer = load_tokenizer(model_dir)
    socket_dir = create_socket_dir(settings)
    try:
        endpoints = make_endpoints(settings, socket_dir)
        log.info("starting_workers", num_workers=settings.num_workers,
                 transport=settings.zmq_transport)
        conductor = start_child(conductor_main, (settings, endpoints), "mstar-conductor")
        try:
            # uvloop: the event loop's own overhead is a share of every streamed token.
            return uvloop.run(_serve(settings, tokenizer, endpoints, conductor))
        finally:
            conductor.join(CONDUCTOR_STOP_TIMEOUT_S)
            if conductor.is_alive():
                log.warning("conductor_killed", pid=conductor.pid)
                conductor.kill()
                conductor.join(5)
    finally:
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def _serve(settings: WorkerSettings, tokenizer: Any, endpoints: Any, conductor: Any) -> int:
    from mstar.api_server.app import build_app
    from mstar.api_server.metrics import Metrics
    from mstar.api_server.state import ServerState

    loop = asyncio.get_running_loop()
    stop, force = asyncio.Event(), asyncio.Event()

    def on_signal(sig: int) -> None:
        log.info("signal_received", signal=signal.Signals(sig).name)
        (force if stop.is_set() else stop).set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    client = EngineClient(endpoints, conductor)
    reason = "stopped"
    try:
        try:
            # The conductor enforces startup_timeout_s with a precise message; this is a backstop.
            ready = await client.wait_ready(settings.startup_timeout_s + STARTUP_SLACK_S, stop)
        except StartupError as exc:
            log.error("startup_failed", reason=str(exc))
            return 1
        if ready is None:
            log.info("startup_interrupted")
            return 0
        try:
            sock = _bind(settings.host, settings.port)
        except OSError as exc:
            log.error("bind_failed", host=settings.host, port=settings.port, error=str(exc))
            return 1
        state = ServerState(settings=settings, tokenizer=tokenizer, client=client,
                            model_name=ready.model_name, max_model_len=ready.max_model_len,
                            metrics=Metrics())
        config = uvicorn.Config(build_app(state), log_config=None, access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2)
        server = _Server(config)
        client.start()
        serving = loop.create_task(server.serve(sockets=[sock]))
        log.info("server_ready", url=f"http://{settings.host}:{settings.port}",
                 model=ready.model_name, workers=ready.num_workers,
                 max_model_len=ready.max_model_len)
        waits = [serving, loop.create_task(stop.wait()), loop.create_task(client.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        crashed = serving.done()  # uvicorn stopped on its own
        if stop.is_set() and not client.failed.is_set():
            await _drain(state, settings.shutdown_timeout_s, force, client.failed)
        if client.failed.is_set():
            reason = "fault"
            await asyncio.sleep(FAULT_FLUSH_S)  # let the 503s of pending requests go out
        server.should_exit = True
        await serving
        for task in waits:
            task.cancel()
        sock.close()
        code = 1 if client.failed.is_set() or crashed else 0
        log.info("server_stopped", exit_code=code, reason=reason)
        return code
    finally:
        await client.shutdown(reason)
        client.close()


async def _drain(state: Any, timeout_s: float, force: asyncio.Event, failed: asyncio.Event) -> None:
    """Refuse new requests; give in-flight ones up to timeout_s to finish."""
    state.draining = True
    log.info("draining", in_flight=state.in_flight, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while state.in_flight and time.monotonic() < deadline:
        if force.is_set() or failed.is_set():
            break
        await asyncio.sleep(0.05)
    log.info("drained", in_flight=state.in_flight)
