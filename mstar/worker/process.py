"""Entry point of a worker process (started by the conductor)."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING

import structlog

from mstar.ipc.cpu_affinity import process_cpus, threads_started_on
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
    from mstar.settings.checks.cpu_binding import cpu_binding
    from mstar.settings.checks.preflight import gpu_visible
    from mstar.worker.rank import join_rank
    from mstar.worker.worker import Worker

    rank = 0 if rendezvous is None else rendezvous.rank
    binding = cpu_binding(settings, process_cpus(), gpu_visible())
    try:  # MSTAR_CPU_BIND: zmq's I/O thread, started here, on the front's CPU
        with nullcontext() if binding is None else threads_started_on(binding.front):
            channel, group = join_rank(settings, index, endpoints, rendezvous)
    except Exception:
        log.exception("worker_failed", worker=index, rank=rank)
        return 1
    code = 0
    try:
        Worker(settings, index, channel, None if group is None else group.model,
               None if binding is None else binding.engine).run()
    except Exception:
        log.exception("worker_failed", worker=index, rank=rank)
        code = 1
    finally:
        channel.close()
    if code == 0:
        leave_group()
    return code
