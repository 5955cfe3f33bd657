"""A replica's rank as a Ray actor (MSTAR_DISTRIBUTED_EXECUTOR=ray, ``mstar.conductor.ray_executor``).

The conductor wraps ``RankActor`` with ``ray.remote`` (this module never imports Ray at import time,
so the worker package stays importable without the extra). First ``place`` reports where Ray put
the actor: its node's address and free ports there, for the replica's command socket (rank 0) and
its torch.distributed rendezvous (rank 0 of a tensor-parallel group). The conductor then calls
``run`` with the frozen settings, the instance's endpoints (the command addresses the actors
reported) and the group's rendezvous: the worker's own body (``run_worker``) runs in the actor
until the conductor's Shutdown, and its exit code is the call's result.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mstar.engine.rendezvous import free_port
from mstar.logging_setup import configure_logging
from mstar.worker.process import run_worker

if TYPE_CHECKING:
    from mstar.engine.rendezvous import Rendezvous
    from mstar.ipc.endpoints import Endpoints
    from mstar.settings import WorkerSettings


@dataclass(frozen=True)
class RankPlace:
    """Where Ray placed one rank: its node's address and id, its pid and actor id, and ports
    free on that node (0 where the rank needs none)."""

    node_ip: str
    node_id: str
    pid: int
    actor_id: str
    command_port: int
    rendezvous_port: int

    @property
    def command_address(self) -> str:
        return f"tcp://{self.node_ip}:{self.command_port}"


class RankActor:
    def place(self, leader: bool, group: bool) -> RankPlace:
        """``leader``: rank 0, which binds the replica's command socket; ``group``: the replica
        is a tensor-parallel group, whose ranks meet at rank 0's node."""
        import ray

        ip, context = ray.util.get_node_ip_address(), ray.get_runtime_context()
        return RankPlace(ip, context.get_node_id(), os.getpid(), context.get_actor_id(),
                         free_port(ip) if leader else 0,
                         free_port(ip) if leader and group else 0)

    def run(self, settings: WorkerSettings, index: int, endpoints: Endpoints,
            rendezvous: Rendezvous | None) -> int:
        configure_logging(settings.log_level, settings.log_format)
        return run_worker(settings, index, endpoints, rendezvous)
