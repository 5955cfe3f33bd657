"""Entry point of a worker process (started by the conductor with the spawn context)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import structlog

from mstar.conductor.endpoints import Endpoints
from mstar.conductor.lifecycle import die_with_parent, ignore_stop_signals

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def worker_main(settings: WorkerSettings, index: int, endpoints: Endpoints) -> None:
    from mstar.logging_setup import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    die_with_parent()
    ignore_stop_signals()
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
