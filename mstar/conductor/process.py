"""Entry point of the conductor process (started by ``mstar serve`` with the spawn context)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mstar.conductor.endpoints import Endpoints
from mstar.conductor.lifecycle import die_with_parent, ignore_stop_signals

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings


def conductor_main(settings: WorkerSettings, endpoints: Endpoints) -> None:
    from mstar.logging_setup import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    # If the API server is killed outright, its socket directory would be left behind.
    die_with_parent(cleanup=lambda: _remove(endpoints.socket_dir))
    ignore_stop_signals()
    from mstar.conductor.conductor import Conductor

    sys.exit(Conductor(settings, endpoints).run())


def _remove(socket_dir: Path | None) -> None:
    if socket_dir is not None:
        shutil.rmtree(socket_dir, ignore_errors=True)
