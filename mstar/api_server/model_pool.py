"""The models of MSTAR_MODELS and their replica groups: the one owner of which model is loaded.

Owned by the API server's event loop: every transition is decided by ``PoolState`` (the pure
state machine, ``context.pool_state``) and applied here, without an ``await`` between deciding
and recording it, so two coroutines never decide on the same state.

- ``acquire`` waits, up to MSTAR_MODELS_LOAD_WAIT_S, until the model is loaded (starting the load
  of an unloaded one), then counts the request on it; ``release`` ends it. Past the wait:
  ``Unavailable`` (a 503 with Retry-After); the load goes on for the next request.
- A load first makes room under MSTAR_MODELS_MEMORY_BUDGET_MB by unloading idle models, least
  recently used first; models with requests in flight are never chosen.
- ``reap`` (every REAP_S) unloads models idle past their keep_alive, and a model whose workers
  failed once its requests have ended (its next request loads it again).
- ``unload`` (the admin route) stops new requests at once; those in flight finish first.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

import structlog

from mstar.api_server.context.pool_metrics import PoolMetrics
from mstar.api_server.context.pool_state import LOADED, LOADING, UNLOADED, UNLOADING, PoolState
from mstar.api_server.model_group import LoadError, ModelGroup, close_group, open_group, resolve, weights_mb

if TYPE_CHECKING:
    from mstar.settings import LoadedSettings, WorkerSettings

log = structlog.get_logger(__name__)

REAP_S = 0.25  # how often idle models are looked for
RETRY_AFTER_S = 5  # a 503's Retry-After while the model loads


class Unavailable(Exception):
    """The model is not ready for this request: a 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelPool:
    def __init__(self, models: dict[str, LoadedSettings], main: WorkerSettings,
                 stop: asyncio.Event) -> None:
        self.models = models  # name -> its settings, in MSTAR_MODELS' order
        # keep_alive and the load wait are each model's (its env file may set them); the
        # budget is the server's
        self.state = PoolState({n: s.settings.models_keep_alive_s for n, s in models.items()},
                               main.models_memory_budget_mb)
        self.groups: dict[str, ModelGroup] = {}
        self.metrics = PoolMetrics(list(models))
        self.stop = stop
        self.attempts = dict.fromkeys(models, 0)  # loads started, per model
        self.failures: dict[str, tuple[int, str]] = {}  # model -> (attempt, why it failed)
        self.tasks: set[asyncio.Task] = set()  # loads and closes running
        self.loads: set[asyncio.Task] = set()  # the loads among them (cancelled at close)
        self._changed = asyncio.Event()  # replaced at each transition: waiters wake and look

    def _notify(self) -> None:
        for name, model in self.state.models.items():
            self.metrics.show(name, model)
        self._changed.set()
        self._changed = asyncio.Event()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def acquire(self, name: str, keep_alive_s: float | None) -> ModelGroup:
        wait_s = self.models[name].settings.models_load_wait_s
        deadline = time.monotonic() + wait_s
        waited_for = None
        while True:
            model = self.state[name]
            if model.state == LOADED and not self.groups[name].client.failed.is_set():
                self.state.begin(name, time.monotonic(), keep_alive_s)
                self._notify()
                return self.groups[name]
            if model.state == UNLOADED:
                failed = self.failures.get(name)
                if waited_for is not None and failed is not None and failed[0] >= waited_for:
                    raise Unavailable(f"model '{name}' failed to load: {failed[1]}")
                self._begin_load(name)
            if waited_for is None:
                waited_for = self.attempts[name] if model.state != UNLOADING else None
            changed, remaining = self._changed, deadline - time.monotonic()
            if remaining <= 0 or self.stop.is_set():
                raise Unavailable(f"model '{name}' is {self.state[name].state}; not ready after "
                                  f"MSTAR_MODELS_LOAD_WAIT_S={wait_s:g}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)

    def release(self, name: str) -> None:
        self.state.end(name, time.monotonic())
        self._notify()

    def _begin_load(self, name: str) -> None:
        self.state.move(name, LOADING, time.monotonic())
        self.attempts[name] += 1
        self._notify()
        task = self._spawn(self._load(name, self.attempts[name]))
        self.loads.add(task)
        task.add_done_callback(self.loads.discard)

    async def _load(self, name: str, attempt: int) -> None:
        settings = self.models[name]
        try:
            model_dir = await asyncio.to_thread(resolve, settings)
            size = await asyncio.to_thread(weights_mb, model_dir)
            evict = self.state.evictions(size)
            if evict is None:
                raise LoadError(f"{size:.0f} MiB does not fit MSTAR_MODELS_MEMORY_BUDGET_MB="
                                f"{self.state.budget_mb:g} beside the models in use")
            self.state.sized(name, size)
            for other in evict:
                self.state.move(other, UNLOADING, time.monotonic())
            self._notify()
            await asyncio.gather(*(self._close(other, "evicted") for other in evict))
            self.groups[name] = await open_group(name, settings, model_dir, self.stop)
        except (Exception, asyncio.CancelledError) as exc:  # noqa: BLE001 - said to its waiters
            why = str(exc) if isinstance(exc, LoadError) else repr(exc)
            log.error("model_load_failed", model=name, reason=why)
            self.failures[name] = (attempt, why)
            self.state.move(name, UNLOADED, time.monotonic())
            self._notify()
            return
        self.state.move(name, LOADED, time.monotonic())
        self.metrics.loads.labels(model=name).inc()
        self._notify()

    async def unload(self, name: str, reason: str) -> bool:
        """Unload a loaded model once its requests have ended; False when it was not loaded."""
        if self.state[name].state != LOADED:
            return False
        self.state.move(name, UNLOADING, time.monotonic())
        self._notify()
        while self.state[name].in_flight:
            await self._changed.wait()
        await self._close(name, reason)
        return True

    async def _close(self, name: str, reason: str) -> None:
        """Stop an ``unloading`` model's group (no request in flight on it)."""
        group = self.groups.pop(name)
        try:
            await close_group(group, reason)
        finally:
            self.state.move(name, UNLOADED, time.monotonic())
            self.metrics.unloads.labels(model=name, reason=reason).inc()
            self._notify()

    async def load(self, name: str) -> None:
        """Load a model now (the admin route), waiting as a request would; Unavailable."""
        await self.acquire(name, None)
        self.release(name)

    async def reap(self) -> None:
        """Unload idle models past their keep_alive, and failed ones once idle; until stopped."""
        while not self.stop.is_set():
            now = time.monotonic()
            failed = [n for n, g in self.groups.items()
                      if g.client.failed.is_set() and self.state.idle(n)]
            going = list(dict.fromkeys([*self.state.expired(now), *failed]))
            for name in going:
                self.state.move(name, UNLOADING, now)
                self._spawn(self._close(name, "failed" if name in failed else "idle"))
            if going:
                self._notify()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), REAP_S)

    def in_flight(self) -> int:
        return sum(m.in_flight for m in self.state.models.values())

    async def close(self) -> None:
        """Stop every model (the server is stopping; its requests have ended or been cut)."""
        for task in list(self.loads):  # a load in progress stops; unloads finish
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for name, model in self.state.models.items():
            if model.state == LOADED:
                self.state.move(name, UNLOADING, time.monotonic())
        await asyncio.gather(*(self._close(n, "stopped") for n in list(self.groups)),
                             return_exceptions=True)
