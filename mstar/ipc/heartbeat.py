"""How often a replica on another host says it is alive (``Alive``), for its liveness interval:
the sender (``mstar.worker.remote``) and the judge (``mstar.conductor.liveness``) share it."""

from __future__ import annotations

HEARTBEATS_PER_INTERVAL = 4  # a replica is down after missing this many heartbeats in a row


def heartbeat_s(interval_s: float) -> float:
    """How often a remote replica's ``mstar worker`` sends ``Alive``."""
    return interval_s / HEARTBEATS_PER_INTERVAL
