"""The API server's engine client: where a request goes."""

from __future__ import annotations

from mstar.api_server.generation.replica_health import ReplicaHealth
from mstar.api_server.generation.routing import least_loaded
from mstar.ipc.messages import Liveness, WorkerStats


def test_placement_takes_the_least_loaded_replica():
    assert least_loaded([2, 1, 1], {}, [0, 1, 2]) == 1  # fewest live requests, then lowest index
    busy = {1: WorkerStats(1, 1, 3, 0.5, 0), 2: WorkerStats(2, 1, 0, 0.9, 0)}
    assert least_loaded([2, 1, 1], busy, [0, 1, 2]) == 2  # then fewest waiting by its stats
    assert least_loaded([1, 1], {0: WorkerStats(0, 1, 0, 0.7, 0),
                                 1: WorkerStats(1, 1, 0, 0.2, 0)}, [0, 1]) == 1  # then KV in use


def test_placement_skips_replicas_that_are_down():
    health = ReplicaHealth(3)
    assert health.update(Liveness({1: "worker 1 (pid 7) is down"})) == {1: "worker 1 (pid 7) is down"}
    assert least_loaded([2, 0, 1], {}, health.up()) == 2  # the least loaded one is down
    assert health.degraded() == "worker 1 (pid 7) is down" and health.unavailable() is None
    assert health.update(Liveness({0: "a", 1: "b", 2: "c"})) == {0: "a", 2: "c"}
    assert health.up() == [] and "no replica is up: a; b; c" in health.unavailable()
    assert health.update(Liveness({})) == {} and health.degraded() is None
