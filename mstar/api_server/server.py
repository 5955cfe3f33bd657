"""The life of ``mstar serve`` after settings are built: start the conductor, wait until every
worker is ready, serve HTTP, then drain and stop everything (or fail fast on a fault).

Signals: the first SIGINT/SIGTERM starts a drain (new requests get 503, in-flight ones may finish
for up to shutdown_timeout_s); a second one stops at once. Requests still running then are cut:
each fails with a 503 (a stream ends with an error chunk and its terminator) and the log says how
many. A worker fault fails pending requests with 503 and exits non-zero. SIGHUP reloads the
settings (``reload.py``): the env files given at start are read again and the reloadable knobs
applied in every process; a SIGHUP before the server is ready is logged as deferred and applied
once it is. The children get the settings with their secrets withheld (``withhold_secrets``).

The HTTP socket is bound by the caller before the model is resolved (``listener.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import uvicorn
import uvloop

from mstar.api_server.audio.speech import speech_model
from mstar.api_server.generation.engine_client import EngineClient, Failure, Sink, StartupError
from mstar.api_server.generation.routing import Router
from mstar.api_server.media.model import model_media
from mstar.conductor.process import conductor_main
from mstar.ipc.cpu_affinity import bind_process, process_cpus
from mstar.ipc.endpoints import create_socket_dir, make_endpoints
from mstar.ipc.lifecycle import start_child
from mstar.ipc.security import MissingClusterSecret
from mstar.models.loading.placement_check import encoder_placement_problem
from mstar.settings.checks.cpu_binding import cpu_binding
from mstar.settings.checks.executor import executor_problem
from mstar.settings.checks.preflight import gpu_visible, tensor_parallel_problem
from mstar.settings.wire import withhold_secrets

if TYPE_CHECKING:
    import socket

    from mstar.api_server.context.admission import Admission
    from mstar.api_server.reload import DeferredReload
    from mstar.settings import LoadedSettings, WorkerSettings

log = structlog.get_logger(__name__)

CONDUCTOR_STOP_TIMEOUT_S = 20.0
FAULT_FLUSH_S = 0.5
STARTUP_SLACK_S = 10.0
CUT_GRACE_S = 2.0  # after the drain timeout: how long cut requests get to send their error
DRAIN_POLL_S = 0.05


class UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: ``serve`` decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Any:
        yield


def load_tokenizer(model_dir: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def preflight_problem(settings: WorkerSettings, model_dir: Path) -> str | None:
    """Why the workers cannot serve this model with these settings (logged, exit 1), or None."""
    return (executor_problem(settings) or tensor_parallel_problem(settings, model_dir)
            or encoder_placement_problem(settings, model_dir))


def start_conductor(settings: WorkerSettings, endpoints: Any) -> Any:
    """Start one replica group: its conductor, which starts and watches the workers."""
    return start_child(conductor_main, (withhold_secrets(settings), endpoints), "mstar-conductor")


def stop_conductor(conductor: Any) -> None:
    """Wait for the conductor (asked to stop, or stopping) to exit; kill it past the limit."""
    conductor.join(CONDUCTOR_STOP_TIMEOUT_S)
    if conductor.is_alive():
        log.warning("conductor_killed", pid=conductor.pid)
        conductor.kill()
        conductor.join(5)


def load_front(settings: WorkerSettings, model_dir: Path) -> tuple[Any, Any, Any]:
    """What the API server itself loads of the model: (tokenizer, media, speech)."""
    tokenizer = load_tokenizer(model_dir)
    media = model_media(model_dir, settings.score_tokens)
    return tokenizer, media, speech_model(model_dir, media.modalities)


def serve(loaded: LoadedSettings, model_dir: Path, sock: socket.socket) -> int:
    """Run the whole serving stack on the listening ``sock``; the exit code of ``mstar serve``."""
    from mstar.api_server.reload import DeferredReload

    deferred = DeferredReload()
    signal.signal(signal.SIGHUP, deferred)  # not fatal while starting; applied once ready
    settings = loaded.settings
    problem = preflight_problem(settings, model_dir)
    if problem is not None:
        log.error("preflight_failed", reason=problem)
        return 1
    binding = cpu_binding(settings, process_cpus(), gpu_visible())
    if binding is not None:  # MSTAR_CPU_BIND: this process's threads on the front's CPU
        bind_process(binding.front)
        log.info("cpu_bound", engine_cpus=list(binding.engine), front_cpu=binding.front)
    socket_dir = create_socket_dir(settings)
    try:
        try:
            endpoints = make_endpoints(settings, socket_dir)
        except MissingClusterSecret as exc:
            log.error("startup_failed", reason=str(exc))
            return 1
        log.info("starting_workers", num_workers=settings.num_workers,
                 transport=settings.zmq_transport,
                 authenticated=endpoints.security.keys is not None)
        conductor = start_conductor(settings, endpoints)
        try:
            try:  # after the start: the workers import and load the model meanwhile
                tokenizer, media, speech = load_front(settings, model_dir)
            except BaseException:
                conductor.kill()  # its workers die with it
                raise
            # uvloop: the event loop's own overhead is a share of every streamed token.
            return uvloop.run(_serve(loaded, tokenizer, media, endpoints, conductor, sock,
                                     deferred, speech))
        finally:
            stop_conductor(conductor)
    finally:
        if socket_dir is not None:
            shutil.rmtree(socket_dir, ignore_errors=True)


def served_app(loaded: LoadedSettings, client: EngineClient, ready: Any, tokenizer: Any,
               media: Any, speech: Any, name: str | None = None) -> tuple[Any, Any, Any]:
    """One model's FastAPI app over its ready engine client: (app, running, admission).
    ``name``: the name the model is served under (None: the one its workers report)."""
    from mstar.api_server.app import build_app
    from mstar.api_server.context.adapters import AdapterNames
    from mstar.api_server.context.admission import Admission
    from mstar.api_server.context.metrics import Metrics
    from mstar.api_server.context.running import RunningSettings
    from mstar.api_server.context.served import ServedModel

    settings = loaded.settings
    running = RunningSettings(settings, loaded)
    model = ServedModel(name or ready.model_name, ready.max_model_len, running, media.modalities,
                        labels=media.labels, generates=media.generates, outputs=media.outputs,
                        voices=media.voices, speaks_replies=media.speaks_replies,
                        adapters=AdapterNames(settings.lora_modules))
    admission = Admission(lambda: client.failure)
    app = build_app(client, tokenizer, running, model, admission, Metrics(), media.processor,
                    speech)
    return app, running, admission


def stop_signals() -> tuple[asyncio.Event, asyncio.Event]:
    """(stop, force): SIGINT or SIGTERM sets stop (drain, then exit); a second one sets force."""
    stop, force = asyncio.Event(), asyncio.Event()

    def on_signal(sig: int) -> None:
        log.info("signal_received", signal=signal.Signals(sig).name)
        (force if stop.is_set() else stop).set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    return stop, force


async def _serve(loaded: LoadedSettings, tokenizer: Any, media: Any, endpoints: Any,
                 conductor: Any, sock: socket.socket, deferred: DeferredReload,
                 speech: Any = None) -> int:
    from mstar.api_server.http.listener import uvicorn_config
    from mstar.api_server.reload import reload_server_settings

    settings: WorkerSettings = loaded.settings
    loop = asyncio.get_running_loop()
    stop, force = stop_signals()
    client = EngineClient(endpoints, conductor, tokenizer, Router.of(settings))
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
        app, running, admission = served_app(loaded, client, ready, tokenizer, media, speech)
        loop.add_signal_handler(signal.SIGHUP, reload_server_settings, running, client.send_control)
        server = UvicornServer(uvicorn_config(app, settings))
        freeze_heap()
        client.start()
        serving = loop.create_task(server.serve(sockets=[sock]))
        log.info("server_ready", url=f"http://{settings.host}:{settings.port}",
                 model=ready.model_name, workers=ready.num_workers,
                 max_model_len=ready.max_model_len)
        if deferred.pending:
            reload_server_settings(running, client.send_control)
        waits = [serving, loop.create_task(stop.wait()), loop.create_task(client.failed.wait())]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        crashed = serving.done()  # uvicorn stopped on its own
        if stop.is_set() and not client.failed.is_set():
            await _drain(admission, client, settings.shutdown_timeout_s, force)
        if client.failed.is_set():
            reason = "fault"
            await asyncio.sleep(FAULT_FLUSH_S)  # let the 503s of pending requests go out
        server.should_exit = True
        await serving
        for task in waits:
            task.cancel()
        code = 1 if client.failed.is_set() or crashed else 0
        log.info("server_stopped", exit_code=code, reason=reason)
        return code
    finally:
        await client.shutdown(reason)
        client.close()


def freeze_heap() -> None:
    """The start-up heap (transformers, the tokenizer: ~300k objects) is never garbage; left to
    the collector, each full collection would stall the event loop for ~0.5 s."""
    gc.collect()
    gc.freeze()


async def _drain(admission: Admission, client: EngineClient, timeout_s: float,
                 force: asyncio.Event) -> None:
    """Refuse new requests; give in-flight ones up to timeout_s to finish, then cut the rest."""
    admission.drain()
    at_start = admission.in_flight
    log.info("draining", in_flight=at_start, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    while admission.in_flight and time.monotonic() < deadline and not force.is_set():
        if client.failed.is_set():
            return  # the fault already failed every pending request
        await asyncio.sleep(DRAIN_POLL_S)
    if not admission.in_flight:
        log.info("drained", finished=at_start)
        return
    cut = admission.in_flight
    why = "a second signal" if force.is_set() else f"shutdown_timeout_s={timeout_s:g}"
    await cut_requests(admission, client, f"server shut down before the request finished ({why})")
    log.warning("drain_cut", cut=cut, finished=at_start - cut, reason=why,
                still_running=admission.in_flight)


async def cut_requests(admission: Admission, client: EngineClient, message: str) -> None:
    """Fail every request still in flight with a 503, until none is left or CUT_GRACE_S passed.

    Repeated, so that a request submitted while the first cut went out (it was still being
    tokenized) is cut too.
    """
    done: set[Sink] = set()
    deadline = time.monotonic() + CUT_GRACE_S
    while admission.in_flight and time.monotonic() < deadline:
        for sink in set(client.sinks()) - done:
            sink.put_nowait(Failure(503, message))
            done.add(sink)
        await asyncio.sleep(DRAIN_POLL_S)
