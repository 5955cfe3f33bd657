"""Prometheus metrics of the model pool (MSTAR_MODELS), on the server's /metrics: each model's
state, the memory it counts against the budget, its requests in flight, its loads and unloads."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from mstar.api_server.context.pool_state import LOADED, ModelState


class PoolMetrics:
    def __init__(self, names: list[str]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.loaded = Gauge("mstar_model_loaded", "1 while the model is loaded, else 0.",
                            ["model"], registry=r)
        self.memory = Gauge("mstar_model_memory_mb", "What the model counts against "
                            "MSTAR_MODELS_MEMORY_BUDGET_MB (its weights, MiB) while loading, "
                            "loaded or unloading; 0 once unloaded.", ["model"], registry=r)
        self.in_flight = Gauge("mstar_model_requests_in_flight", "Requests running on the model.",
                               ["model"], registry=r)
        self.loads = Counter("mstar_model_loads", "Loads of the model that finished.", ["model"],
                             registry=r)
        self.unloads = Counter("mstar_model_unloads", "Unloads of the model, by reason (idle, "
                               "evicted, admin, failed, stopped).", ["model", "reason"],
                               registry=r)
        for name in names:
            self.show(name, ModelState(name))
            self.loads.labels(model=name)

    def show(self, name: str, model: ModelState) -> None:
        self.loaded.labels(model=name).set(1 if model.state == LOADED else 0)
        self.memory.labels(model=name).set(model.size_mb)
        self.in_flight.labels(model=name).set(model.in_flight)

    def render(self) -> bytes:
        return generate_latest(self.registry)
