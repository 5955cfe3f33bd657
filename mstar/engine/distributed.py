"""One tensor-parallel group of engine processes: joining it (where to meet: ``rendezvous``), and
the per-step input broadcast.

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

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
import torch
import torch.distributed as dist

from mstar.engine.rendezvous import Rendezvous
from mstar.models.families.parallel import TensorParallel

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class RankGroup:
    """A joined group: the model's collectives and the control group of the input broadcast."""

    model: TensorParallel
    control: Any  # a gloo ProcessGroup


def join_group(rendezvous: Rendezvous, device: torch.device, timeout_s: float) -> RankGroup:
    """Join the group (blocks until every rank has arrived, at most ``timeout_s``)."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=timeout_s)
    dist.init_process_group(backend, init_method=rendezvous.init_method, rank=rendezvous.rank,
                            world_size=rendezvous.size, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout)
    log.info("tensor_parallel_joined", rank=rendezvous.rank, size=rendezvous.size,
             backend=backend, rendezvous=rendezvous.init_method)
    return RankGroup(TensorParallel(rendezvous.rank, rendezvous.size), control)


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def broadcast_inputs(group: RankGroup, inputs: list | None) -> list:
    """Rank 0's ``inputs`` on every rank (the others pass None)."""
    box = [inputs]
    dist.broadcast_object_list(box, src=0, group=group.control)
    return box[0]
