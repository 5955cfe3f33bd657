"""Entry point of a worker process (started by the conductor)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import structlog

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.lifecycle import enter_child

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def worker_main(settings: WorkerSettings, index: int, endpoints: Endpoints) -> None:
    enter_child(settings)
    if settings.py_switch_interval_sec is not None:
        sys.setswitchinterval(settings.py_switch_interval_sec)

    from mstar.worker.channel import WorkerChannel
    from mstar.worker.worker import Worker

    channel = WorkerChannel(endpoints, index)
    try:
        Worker(settings, index, channel).run()
    except Exception:
        log.exception("worker_failed", worker=index)
        sys.exit(1)
    finally:
        channel.close()
