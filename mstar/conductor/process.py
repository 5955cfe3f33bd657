"""Entry point of the conductor process (started by ``mstar serve``)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.lifecycle import enter_child

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings


def conductor_main(settings: WorkerSettings, endpoints: Endpoints) -> None:
    # If the API server is killed outright, its socket directory would be left behind.
    enter_child(settings, cleanup=lambda: _remove(endpoints.socket_dir))
    from mstar.conductor.conductor import Conductor

    sys.exit(Conductor(settings, endpoints).run())


def _remove(socket_dir: Path | None) -> None:
    if socket_dir is not None:
        shutil.rmtree(socket_dir, ignore_errors=True)
