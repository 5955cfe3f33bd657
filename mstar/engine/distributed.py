"""One tensor-parallel group of engine processes: rendezvous, and the per-step input broadcast.

Every rank runs the same engine: the same scheduler, the same step loop, the same sampler with
the same seeds. Rank 0 alone receives requests; before each engine step it broadcasts the step's
inputs (the messages to apply) and every rank applies them at the same point, so block tables,
batches and sampled tokens agree without being sent (``mstar.worker.rank``).

Two process groups: the model's collectives (all-reduce, all-gather) run on the default group
(NCCL on CUDA, gloo on CPU) from the forward thread only; the input broadcast runs on a separate
gloo group from the main thread only. Each thread issues its collectives in the same order on
every rank, and the two groups never interleave on one communicator, so the overlapped step loop
stays as it is.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog

from mstar.settings import WorkerSettings

if TYPE_CHECKING:  # torch loads where a group is joined: the conductor plans without it
    import torch

    from mstar.models.families.parallel import TensorParallel

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks of one group meet (rank 0's host and a free port) and who this is."""

    addr: str
    port: int
    rank: int
    size: int

    @property
    def init_method(self) -> str:
        return f"tcp://{self.addr}:{self.port}"


@dataclass(frozen=True)
class RankGroup:
    """A joined group: the model's collectives and the control group of the input broadcast."""

    model: TensorParallel
    control: Any  # a gloo ProcessGroup


def free_port(addr: str) -> int:
    """A TCP port free on ``addr`` right now (the rendezvous binds it moments later)."""
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def group_rendezvous(settings: WorkerSettings, replica: int) -> list[Rendezvous | None]:
    """One entry per rank of replica ``replica``: [None] when it is a single process."""
    size = settings.tensor_parallel_size
    if size == 1:
        return [None]
    addr = settings.dist_master_addr
    port = settings.dist_master_port + replica if settings.dist_master_port else free_port(addr)
    return [Rendezvous(addr, port, rank, size) for rank in range(size)]


def check_deterministic_loop(settings: WorkerSettings) -> None:
    """The ranks' step loops must take the same decisions: a timed yield would not."""
    if settings.tensor_parallel_size > 1 and settings.spec_yield_hold_ms > 0:
        raise ValueError(
            f"tensor_parallel_size={settings.tensor_parallel_size} needs spec_yield_hold_ms=0 "
            f"(is {settings.spec_yield_hold_ms:g}): a timed yield could differ between ranks")


def join_group(rendezvous: Rendezvous, device: torch.device, timeout_s: float) -> RankGroup:
    """Join the group (blocks until every rank has arrived, at most ``timeout_s``)."""
    import torch.distributed as dist

    from mstar.models.families.parallel import TensorParallel

    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=rendezvous.init_method, rank=rendezvous.rank,
                            world_size=rendezvous.size, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout)
    log.info("tensor_parallel_joined", rank=rendezvous.rank, size=rendezvous.size,
             backend=backend, rendezvous=rendezvous.init_method)
    return RankGroup(TensorParallel(rendezvous.rank, rendezvous.size), control)


def leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_inputs(group: RankGroup, inputs: list | None) -> list:
    """Rank 0's ``inputs`` on every rank (the others pass None)."""
    import torch.distributed as dist

    box = [inputs]
    dist.broadcast_object_list(box, src=0, group=group.control)
    return box[0]
