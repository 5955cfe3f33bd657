"""The API server's engine client: where a request goes."""

from __future__ import annotations

from mstar.api_server.generation.engine_client import least_loaded
from mstar.ipc.messages import WorkerStats


def test_placement_takes_the_least_loaded_replica():
    assert least_loaded([2, 1, 1], {}) == 1  # fewest live requests, then the lowest index
    busy = {1: WorkerStats(1, 1, 3, 0.5, 0), 2: WorkerStats(2, 1, 0, 0.9, 0)}
    assert least_loaded([2, 1, 1], busy) == 2  # then fewest waiting by the replica's stats
    assert least_loaded([1, 1], {0: WorkerStats(0, 1, 0, 0.7, 0),
                                 1: WorkerStats(1, 1, 0, 0.2, 0)}) == 1  # then KV cache in use
