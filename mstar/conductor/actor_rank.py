"""A rank's Ray actor as the conductor sees a process (MSTAR_DISTRIBUTED_EXECUTOR=ray): the actor's
``run`` call is watched from a thread, and a pipe's read end is its sentinel, readable (EOF) once the
call has ended, so that the conductor's poll sees an actor end as it sees a process exit."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from mstar.worker.ray_actor import RankPlace

log = structlog.get_logger(__name__)


class ActorRank:
    """A rank's actor, seen through what the conductor uses of a process: ``pid``, ``sentinel``
    (readable once the actor's ``run`` has ended), ``exitcode`` (the worker's, or None when Ray
    reported the actor dead), ``join``, ``is_alive`` and ``kill``."""

    def __init__(self, actor, place: RankPlace, run_ref) -> None:
        self.actor = actor
        self.pid = place.pid
        self.exitcode: int | None = None
        self.ended = threading.Event()
        self.sentinel, self._ended_fd = os.pipe()
        threading.Thread(target=self._watch, args=(run_ref, place), daemon=True,
                         name=f"ray-watch-{place.actor_id[:8]}").start()

    def _watch(self, run_ref, place: RankPlace) -> None:
        import ray

        try:
            self.exitcode = ray.get(run_ref)
        except ray.exceptions.RayError as exc:  # the actor died, or its node went away
            log.error("ray_actor_died", pid=self.pid, actor=place.actor_id, node=place.node_ip,
                      reason=str(exc).strip().splitlines()[0])
        finally:
            self.ended.set()
            os.close(self._ended_fd)  # the sentinel reads EOF: readable

    def join(self, timeout: float | None = None) -> None:
        self.ended.wait(timeout)

    def is_alive(self) -> bool:
        return not self.ended.is_set()

    def kill(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)
