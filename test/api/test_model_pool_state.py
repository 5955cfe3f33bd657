"""The model pool's state machine (MSTAR_MODELS, ``context.pool_state``), property-tested: under
any sequence of events its invariants hold, and it refuses every transition that would lose a
request or break the budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.api_server.context.pool_state import (
    LOADED,
    LOADING,
    NEXT,
    RESIDENT,
    STATES,
    UNLOADED,
    UNLOADING,
    PoolError,
    PoolState,
)

NAMES = ("a", "b", "c")
BUDGET = 25.0
SIZES = {"a": 10.0, "b": 10.0, "c": 12.0}


def _pool(keep_alive: float = 5.0, budget: float = BUDGET) -> PoolState:
    return PoolState(dict.fromkeys(NAMES, keep_alive), budget)


def _load(pool: PoolState, name: str, now: float) -> list[str] | None:
    """What ``model_pool`` does to load: decide the evictions, then apply them."""
    pool.move(name, LOADING, now)
    evict = pool.evictions(SIZES[name])
    if evict is None:
        pool.move(name, UNLOADED, now)
        return None
    pool.sized(name, SIZES[name])
    for other in evict:
        pool.move(other, UNLOADING, now)
        pool.move(other, UNLOADED, now)
    pool.move(name, LOADED, now)
    return evict


EVENTS = st.lists(st.tuples(st.sampled_from(("load", "begin", "end", "unload", "reap")),
                            st.sampled_from(NAMES), st.floats(0, 3)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_invariants_hold_under_any_events(events):
    pool, now, running = _pool(), 0.0, dict.fromkeys(NAMES, 0)
    for kind, name, step in events:
        now += step
        model = pool[name]
        before = {n: (m.state, m.in_flight) for n, m in pool.models.items()}
        try:
            if kind == "load":
                evicted = _load(pool, name, now)
                for other in evicted or []:  # only idle models are ever evicted
                    assert before[other] == (LOADED, 0)
            elif kind == "begin":
                pool.begin(name, now)
                running[name] += 1
            elif kind == "end":
                pool.end(name, now)
                running[name] -= 1
            elif kind == "unload":  # the admin's: in-flight requests finish first
                pool.move(name, UNLOADING, now)
                if not model.in_flight:
                    pool.move(name, UNLOADED, now)
            else:
                for gone in pool.expired(now):
                    assert pool[gone].in_flight == 0
                    pool.move(gone, UNLOADING, now)
                    pool.move(gone, UNLOADED, now)
        except PoolError:  # a refused event changes nothing
            assert {n: (m.state, m.in_flight) for n, m in pool.models.items()} == before
        for n, m in pool.models.items():
            assert m.state in STATES
            assert m.in_flight == running[n] >= 0  # no request lost or counted twice
            assert m.in_flight == 0 or m.state in (LOADED, UNLOADING)
            assert m.size_mb == 0 or m.state in RESIDENT
        assert pool.resident_mb() <= BUDGET


def test_requests_begin_only_on_a_loaded_model_and_unload_waits_for_them():
    pool = _pool()
    with pytest.raises(PoolError):
        pool.begin("a", 0.0)
    _load(pool, "a", 0.0)
    pool.begin("a", 1.0)
    pool.move("a", UNLOADING, 2.0)
    with pytest.raises(PoolError):  # a request in flight: the unload cannot end
        pool.move("a", UNLOADED, 2.0)
    with pytest.raises(PoolError):  # no new request while unloading
        pool.begin("a", 2.0)
    pool.end("a", 3.0)
    pool.move("a", UNLOADED, 3.0)
    assert all(target in STATES for targets in NEXT.values() for target in targets)


def test_keep_alive_counts_from_the_last_request_and_a_request_sets_its_own():
    pool = _pool(keep_alive=5.0)
    _load(pool, "a", 0.0)
    pool.begin("a", 1.0)
    assert pool.expired(100.0) == []  # in flight: never idle-unloaded
    pool.end("a", 10.0)
    assert pool.expired(14.9) == [] and pool.expired(15.0) == ["a"]
    pool.begin("a", 20.0, keep_alive_s=-1.0)  # Ollama's keep_alive < 0: forever
    pool.end("a", 20.0)
    assert pool.expired(1e9) == []


def test_eviction_picks_idle_models_least_recently_used_first():
    pool = _pool(budget=25.0)
    _load(pool, "a", 0.0)
    _load(pool, "b", 1.0)
    pool.begin("a", 2.0)  # a is now the most recently used, and busy
    pool.end("a", 3.0)
    assert pool.evictions(SIZES["c"]) == ["b"]  # b: used last at 1.0, before a
    pool.begin("b", 4.0)
    assert pool.evictions(SIZES["c"]) == ["a"]  # b is busy: never chosen
    pool.begin("a", 5.0)
    assert pool.evictions(SIZES["c"]) is None  # both busy: it cannot fit now
    assert _pool(budget=0.0).evictions(1e6) == []  # no budget
