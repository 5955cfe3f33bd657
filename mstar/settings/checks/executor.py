"""Whether the settings can start the replicas with MSTAR_DISTRIBUTED_EXECUTOR: ``mstar serve``
runs this before anything spawns (``preflight_failed``), and ``mstar config validate`` reports it.

Ray is an optional extra: its presence is checked with ``importlib.util.find_spec``, which finds the
package without importing it (``import mstar.settings`` and ``mstar config`` never import Ray).
"""

from __future__ import annotations

import importlib.util

from mstar.settings.schema import WorkerSettings
from mstar.settings.sources import Problem

RAY_EXTRA = "pip install 'mstar[ray]'"


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def executor_problem(settings: WorkerSettings) -> str | None:
    """The one-line reason the replicas cannot be started as configured, or None."""
    if settings.distributed_executor != "ray":
        return None
    if not ray_installed():
        return ("MSTAR_DISTRIBUTED_EXECUTOR=ray needs Ray, which is not installed here: "
                f"{RAY_EXTRA} (or MSTAR_DISTRIBUTED_EXECUTOR=mp)")
    if settings.zmq_transport != "tcp":
        return ("MSTAR_DISTRIBUTED_EXECUTOR=ray needs MSTAR_ZMQ_TRANSPORT=tcp: the Ray actors "
                "reach the conductor and the API server over the network")
    if settings.remote_workers:
        return (f"MSTAR_DISTRIBUTED_EXECUTOR=ray places every replica itself: "
                f"MSTAR_REMOTE_WORKERS={settings.remote_workers} must be 0")
    if settings.device_ids:
        return ("MSTAR_DISTRIBUTED_EXECUTOR=ray gives each rank the GPU Ray assigned it: leave "
                "MSTAR_DEVICE_IDS unset")
    return None


def executor_problems(settings: WorkerSettings) -> list[Problem]:
    """``executor_problem`` as ``mstar config validate`` lists it (an error in every mode)."""
    problem = executor_problem(settings)
    if problem is None:
        return []
    return [Problem("MSTAR_DISTRIBUTED_EXECUTOR", problem, "preflight", error=True)]
