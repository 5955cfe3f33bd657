"""MSTAR_DISTRIBUTED_EXECUTOR=ray: the conductor starts the replicas' ranks as Ray actors.

The one seam between the conductor and Ray (only this module imports it, and only the conductor
of a server that asked for Ray imports this module). The conductor connects to the cluster at
MSTAR_RAY_ADDRESS as a Ray driver and asks for one placement group per replica: one bundle per rank
(``CPU: 1``, plus ``GPU: 1`` with MSTAR_DEVICE=cuda), packed on one node (STRICT_PACK) or spread
(MSTAR_RAY_PLACEMENT). Each rank is a ``RankActor`` in its bundle; it reports its node's address
and free ports there, and the conductor hands every actor the frozen settings, the endpoints
with the command addresses the actors reported, and its group's torch.distributed rendezvous
(rank 0's node and port, which went through Ray). Requests and outputs then go over ZeroMQ as
with processes (tcp, CURVE).

Liveness is Ray's: each actor's ``run`` call is watched (``ActorRank``); when it ends (the worker
returned, or Ray reports the actor dead: its node was lost, it was killed), a file descriptor turns
readable and the conductor's poll sees it as it sees a process sentinel. Ray ties the actors and
placement groups to the conductor's driver: if the conductor dies, Ray ends them (no orphans).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import structlog
import zmq

from mstar.conductor.actor_rank import ActorRank
from mstar.conductor.replica import RankProcess, WorkerHandle
from mstar.engine.rendezvous import Rendezvous
from mstar.ipc.lifecycle import ignore_stop_signals
from mstar.ipc.sockets import push_socket
from mstar.worker.ray_actor import RankActor, RankPlace

if TYPE_CHECKING:
    from mstar.ipc.endpoints import Endpoints
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

STRATEGIES = {"pack": "STRICT_PACK", "spread": "SPREAD"}


class RayStartFailed(Exception):
    """The cluster cannot be joined, or a replica cannot be placed: the start fails. Logged
    here too: the API server may see the conductor gone before its Fatal arrives."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        log.error("ray_start_failed", reason=reason)


def where(place: RankPlace) -> str:
    """How the conductor names the rank's actor (after its pid) in logs and 503s."""
    return f", ray actor {place.actor_id[:12]} on node {place.node_ip}"


class RayExecutor:
    def __init__(self, settings: WorkerSettings) -> None:
        import ray

        self.settings = settings
        try:
            ray.init(address=settings.ray_address, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise RayStartFailed(f"cannot join the Ray cluster at MSTAR_RAY_ADDRESS="
                                 f"{settings.ray_address}: {exc}") from None
        # Ray's core installs its own SIGTERM handler (it logs and exits): the API server alone
        # decides how to stop, by message (``enter_child``), so take the stop signals back.
        ignore_stop_signals()
        self.ranks: list[ActorRank] = []

    def start(self, endpoints: Endpoints, ctx: zmq.Context,
              poller: zmq.Poller) -> list[WorkerHandle]:
        """Place every replica, then start its ranks; the conductor's handles of the replicas
        (each rank's ``sentinel`` registered with ``poller``). RayStartFailed when Ray cannot
        place one."""
        placed = [self.place(i) for i in range(self.settings.num_workers)]
        addresses = tuple(places[0].command_address for _, places in placed)
        endpoints = dataclasses.replace(endpoints, workers=addresses)
        handles = []
        for i, (actors, places) in enumerate(placed):
            ranks = []
            for rank, (actor, place) in enumerate(zip(actors, places, strict=True)):
                run = actor.run.remote(self.settings, i, endpoints, rendezvous(places, rank))
                self.ranks.append(ActorRank(actor, place, run))
                poller.register(self.ranks[-1].sentinel, zmq.POLLIN)
                ranks.append(RankProcess(rank, self.ranks[-1], where=where(place)))
                log.info("worker_started", worker=i, rank=rank, pid=place.pid,
                         ray_actor=place.actor_id, node=place.node_ip, ray_node=place.node_id)
            handles.append(WorkerHandle(i, ranks, push_socket(ctx, addresses[i],
                                                              endpoints.security), addresses[i]))
        return handles

    def place(self, replica: int) -> tuple[list, list[RankPlace]]:
        """Replica ``replica``'s placement group, its rank actors, and where each one landed."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        size, timeout = self.settings.tensor_parallel_size, self.settings.startup_timeout_s
        gpus = 1 if self.settings.device == "cuda" else 0
        bundle = {"CPU": 1, "GPU": 1} if gpus else {"CPU": 1}
        strategy = STRATEGIES[self.settings.ray_placement]
        group = placement_group([bundle] * size, strategy=strategy, name=f"mstar-replica-{replica}")
        wait(group.ready(), timeout, f"Ray could not place worker {replica} ({size} x {bundle}, "
             f"{strategy})")
        actor_class = ray.remote(RankActor)
        actors = [actor_class.options(
            num_cpus=1, num_gpus=gpus, max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=rank)).remote() for rank in range(size)]
        places = wait([a.place.remote(rank == 0, size > 1) for rank, a in enumerate(actors)],
                      timeout, f"worker {replica}'s Ray actors did not start")
        return actors, places

    def stop(self) -> None:
        """End every actor and leave the cluster (after the conductor's Shutdown and its wait).
        The placement groups are the job's: Ray removes them when the driver leaves (removing
        them here would block for good when Ctrl-C reached a ``local`` cluster's processes)."""
        import ray

        for rank in self.ranks:  # a returned run leaves its actor up: end every one
            rank.kill()
            os.close(rank.sentinel)
        ray.shutdown()


def wait(refs, timeout_s: float, failure: str):
    """``ray.get`` within the start-up timeout; RayStartFailed saying what did not happen and why
    (an actor that cannot start, e.g. mstar missing on its node, ends with the cause's line)."""
    import ray

    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RayStartFailed(f"{failure} within startup_timeout_s={timeout_s:g}; the cluster "
                             f"has {ray.available_resources()} free") from None
    except ray.exceptions.RayError as exc:
        cause = [line.strip() for line in str(exc).splitlines() if line.strip()][-1]
        raise RayStartFailed(f"{failure}: {cause}") from None


def rendezvous(places: list[RankPlace], rank: int) -> Rendezvous | None:
    """Where a tensor-parallel group's ranks meet: rank 0's node, on the port it reported free."""
    if len(places) == 1:
        return None
    return Rendezvous(places[0].node_ip, places[0].rendezvous_port, rank, len(places))
