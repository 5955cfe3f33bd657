"""Liveness of the replicas on other hosts: the conductor cannot watch their processes, so their
``mstar worker`` sends ``Alive`` a few times per MSTAR_LIVENESS_INTERVAL_S (``mstar.ipc.heartbeat``).
One not heard from for a whole interval is down; the API server learns the set of down replicas
(``Liveness``) each time it changes, and routes no new request there, fails the ones in flight
with 503 and reports itself degraded on /health. A replica heard from again is up again.

A replica Ray reported dead (MSTAR_DISTRIBUTED_EXECUTOR=ray: ``lose``) is down for good, and goes
to the API server the same way."""

from __future__ import annotations

from collections.abc import Callable

from mstar.ipc import messages as m


class RemoteLiveness:
    """When each remote replica was last heard from, and which are down (with the reason)."""

    def __init__(self, remote: range, interval_s: float, now: float):
        self.interval_s = interval_s
        self.heard_at = dict.fromkeys(remote, now)
        self.down: dict[int, str] = {}
        self.lost: dict[int, str] = {}  # down for good: the first reason stays

    def lose(self, replica: int, reason: str) -> None:
        self.lost.setdefault(replica, reason)

    def heard(self, msg: m.Alive, now: float) -> None:
        self.heard_at[msg.worker] = now

    def update(self, now: float, name: Callable[[int], str]) -> m.Liveness | None:
        """The report for the API server when the set of down replicas changed; ``name`` names
        a replica by its index."""
        down = {i: self._reason(name(i), now - at) for i, at in self.heard_at.items()
                if now - at > self.interval_s}
        down.update(self.lost)
        changed = down.keys() != self.down.keys()
        self.down = {i: self.down.get(i, reason) for i, reason in down.items()}
        return m.Liveness(dict(self.down)) if changed else None

    def _reason(self, name: str, silent_s: float) -> str:
        return (f"{name} is down: not heard from for {silent_s:.1f} s "
                f"(MSTAR_LIVENESS_INTERVAL_S={self.interval_s:g})")
