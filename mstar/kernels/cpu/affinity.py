"""MSTAR_CPU_BIND on the engine's side: its intra-op (OpenMP) threads bound one per CPU.

A libgomp team belongs to the thread that runs the parallel regions, so every thread that runs
forwards binds its own team (the worker's main thread; the overlapped loop's forward thread when
it starts). ``torch.set_num_threads`` first, so that torch's regions and the native ops' run on
the team that was bound.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog
import torch

from mstar.kernels.cpu.build import native_kernels

log = structlog.get_logger(__name__)


def intra_op_binder(cpus: tuple[int, ...], cache_dir: Path) -> Callable[[], None] | None:
    """A function that binds the calling thread's team, thread i to ``cpus[i]``; None (logged)
    when the native kernels, which do it, are unavailable."""
    if not native_kernels(cache_dir):
        log.warning("cpu_bind_skipped", reason="the native CPU kernels are unavailable",
                    engine_cpus=list(cpus))
        return None

    def bind() -> None:
        torch.set_num_threads(len(cpus))
        bound = torch.ops.mstar_cpu.bind_threads(list(cpus))
        if bound != len(cpus):
            log.warning("cpu_bind_partial", bound=bound, engine_cpus=list(cpus))

    return bind
