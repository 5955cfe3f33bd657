"""Which replicas the conductor reports down (a replica on another host that missed its liveness
interval, ``mstar.conductor.liveness``), and why: routing leaves them out, their requests in
flight fail with 503 naming them, and /health reports the server degraded while any is down
(a 503 once none is up)."""

from __future__ import annotations

from mstar.ipc import messages as m


class ReplicaHealth:
    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self.down: dict[int, str] = {}  # replica index -> why it is down

    def update(self, msg: m.Liveness) -> dict[int, str]:
        """Take the conductor's report; the replicas it newly counts down, with the reason."""
        newly = {i: reason for i, reason in msg.down.items() if i not in self.down}
        self.down = dict(msg.down)
        return newly

    def up(self) -> list[int]:
        """The replicas that may take new requests."""
        return [i for i in range(self.replicas) if i not in self.down]

    def degraded(self) -> str | None:
        """Why the server is degraded (every down replica's reason), if it is."""
        return "; ".join(self.down[i] for i in sorted(self.down)) or None

    def unavailable(self) -> str | None:
        """Why no request can be placed, if none can: every replica is down."""
        return None if self.up() else f"degraded, no replica is up: {self.degraded()}"
