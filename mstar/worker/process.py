"""Entry point of a worker process (started by the conductor)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import structlog

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.lifecycle import enter_child, exit_now

if TYPE_CHECKING:
    from mstar.engine.rendezvous import Rendezvous
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def worker_main(settings: WorkerSettings, index: int, endpoints: Endpoints,
                rendezvous: Rendezvous | None = None) -> None:
    """Replica ``index``; with ``rendezvous``, one rank of its tensor-parallel group."""
    enter_child(settings)
    exit_now(run_worker(settings, index, endpoints, rendezvous))


def run_worker(settings: WorkerSettings, index: int, endpoints: Endpoints,
               rendezvous: Rendezvous | None = None) -> int:
    """The body of a worker (a child process's, or a Ray actor's: ``mstar.worker.ray_actor``):
    join the rank's group, serve until shutdown; the exit code."""
    if settings.py_switch_interval_sec is not None:
        sys.setswitchinterval(settings.py_switch_interval_sec)

    from mstar.engine.distributed import leave_group
    from mstar.worker.rank import join_rank
    from mstar.worker.worker import Worker

    rank = 0 if rendezvous is None else rendezvous.rank
    try:
        channel, group = join_rank(settings, index, endpoints, rendezvous)
    except Exception:
        log.exception("worker_failed", worker=index, rank=rank)
        return 1
    code = 0
    try:
        Worker(settings, index, channel, None if group is None else group.model).run()
    except Exception:
        log.exception("worker_failed", worker=index, rank=rank)
        code = 1
    finally:
        channel.close()
    if code == 0:
        leave_group()
    return code
