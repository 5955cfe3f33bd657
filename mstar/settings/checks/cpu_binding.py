"""Which CPU each of the serving processes' threads runs on (MSTAR_CPU_BIND), torch-free.

On a CPU machine whose cores the engine's intra-op (OpenMP) threads fill, every parallel region of
a step ends at a barrier that waits for all of them. Whatever else runs (the API server, zmq's
I/O threads) then stalls the step for as long as it displaces one of them, and left to the kernel
it lands on any of them, the first included: the thread that also runs the step's Python between
the regions. Bound, the engine's threads each keep one CPU and the front keeps one CPU, one the
engine leaves free or else the last engine thread's, so that the front only ever displaces that
thread (docs/worker_loop.rst, "Session 14").

The API server computes the binding for itself from the CPUs it may use at start; a worker
computes the same from its own (``mstar.ipc.cpu_affinity.spawning`` starts every child with the
CPUs its parent had before binding, so both see one set). The binding itself is applied there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings


@dataclass(frozen=True)
class CpuBinding:
    engine: tuple[int, ...]  # engine thread i runs on engine[i]; thread 0 runs the step's Python
    front: int  # the API server's threads and the worker's zmq I/O thread


def cpu_binding(settings: WorkerSettings, cpus: Iterable[int], gpu: bool) -> CpuBinding | None:
    """The binding MSTAR_CPU_BIND asks for, given the CPUs the process may use and whether a GPU
    would take the engine (MSTAR_DEVICE=auto); None: the kernel places every thread."""
    cpus = sorted(cpus)
    one_process = (settings.num_workers == 1 and settings.tensor_parallel_size == 1
                   and settings.distributed_executor == "mp" and settings.models is None)
    on_cpu = settings.device == "cpu" or (settings.device == "auto" and not gpu)
    if not (settings.cpu_bind and one_process and on_cpu and len(cpus) >= 2):
        return None
    threads = min(settings.torch_num_threads or len(cpus), len(cpus))
    engine = tuple(cpus[:threads])
    return CpuBinding(engine, cpus[threads] if threads < len(cpus) else engine[-1])
