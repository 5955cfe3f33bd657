"""Several models in one server (MSTAR_MODELS): each model's state and the one state machine of
its transitions. Pure: no processes, no clock (the caller passes the time), no awaiting; the
event-loop owner of the pool (``api_server.model_pool``) asks it and applies what it says.

A model is ``unloaded`` -> ``loading`` -> ``loaded`` -> ``unloading`` -> ``unloaded``; a failed
load goes back to ``unloaded``. Requests run only on a ``loaded`` model (``begin``/``end``
count them). ``unloading`` may start while requests still run (an admin's unload): they finish,
new ones wait, and only when none is left may it end. Idle unloading and eviction pick only
models with no request in flight, so no request is ever cut by them.
"""

from __future__ import annotations

from dataclasses import dataclass

UNLOADED, LOADING, LOADED, UNLOADING = "unloaded", "loading", "loaded", "unloading"
STATES = (UNLOADED, LOADING, LOADED, UNLOADING)
NEXT = {UNLOADED: (LOADING,), LOADING: (LOADED, UNLOADED), LOADED: (UNLOADING,),
        UNLOADING: (UNLOADED,)}
RESIDENT = (LOADING, LOADED, UNLOADING)  # what counts against the memory budget


class PoolError(Exception):
    """A transition the state machine does not allow (a bug in its caller)."""


@dataclass
class ModelState:
    name: str
    state: str = UNLOADED
    in_flight: int = 0
    last_used: float = 0.0  # when its last request began or ended (the LRU order)
    keep_alive_s: float = 0.0  # idle this long once its last request ended: unloaded (<0: never)
    size_mb: float = 0.0  # its weights' size while resident, else 0


class PoolState:
    def __init__(self, keep_alive_s: dict[str, float], budget_mb: float) -> None:
        """``keep_alive_s``: each model's, until a request sets its own."""
        self.models = {name: ModelState(name, keep_alive_s=s) for name, s in keep_alive_s.items()}
        self.budget_mb = budget_mb  # 0: no budget

    def __getitem__(self, name: str) -> ModelState:
        return self.models[name]

    def move(self, name: str, state: str, now: float) -> None:
        model = self.models[name]
        if state not in NEXT[model.state]:
            raise PoolError(f"model {name}: {model.state} -> {state} is not a transition")
        if state == UNLOADED and model.in_flight:
            raise PoolError(f"model {name}: unloaded with {model.in_flight} request(s) in flight")
        model.state = state
        if state in (LOADING, UNLOADED):
            model.size_mb = 0.0  # a loading model counts once ``sized``
        model.last_used = now

    def sized(self, name: str, size_mb: float) -> None:
        """A loading model's size, once its weights were found (it counts from now on)."""
        model = self.models[name]
        if model.state != LOADING:
            raise PoolError(f"model {name}: sized while {model.state}")
        model.size_mb = size_mb

    def begin(self, name: str, now: float, keep_alive_s: float | None = None) -> None:
        """A request starts on the model; ``keep_alive_s``: its own (Ollama's field), which
        stays the model's until another request sets one."""
        model = self.models[name]
        if model.state != LOADED:
            raise PoolError(f"model {name}: a request began while {model.state}")
        model.in_flight += 1
        model.last_used = now
        if keep_alive_s is not None:
            model.keep_alive_s = keep_alive_s

    def end(self, name: str, now: float) -> None:
        model = self.models[name]
        if model.in_flight <= 0:
            raise PoolError(f"model {name}: a request ended that had not begun")
        model.in_flight -= 1
        model.last_used = now

    def idle(self, name: str) -> bool:
        model = self.models[name]
        return model.state == LOADED and model.in_flight == 0

    def expired(self, now: float) -> list[str]:
        """Loaded models idle for longer than their keep_alive: to unload now."""
        return [m.name for m in self.models.values() if self.idle(m.name)
                and m.keep_alive_s >= 0 and now - m.last_used >= m.keep_alive_s]

    def resident_mb(self) -> float:
        return sum(m.size_mb for m in self.models.values() if m.state in RESIDENT)

    def evictions(self, size_mb: float) -> list[str] | None:
        """The idle models to unload, least recently used first, so that ``size_mb`` more fits
        the budget; None when it cannot fit even with every idle model unloaded (the models in
        flight, loading or unloading take the rest). [] when it fits as is."""
        if not self.budget_mb:
            return []
        over = self.resident_mb() + size_mb - self.budget_mb
        chosen: list[str] = []
        idle = sorted((m for m in self.models.values() if self.idle(m.name)),
                      key=lambda m: m.last_used)
        for model in idle:
            if over <= 0:
                break
            chosen.append(model.name)
            over -= model.size_mb
        return chosen if over <= 0 else None
