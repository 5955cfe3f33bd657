"""Where a tensor-parallel group's ranks meet, planned without torch: the conductor (and a
settings reload) decide ranks and ports before any process imports it
(``mstar.engine.distributed`` joins the group)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from mstar.settings import WorkerSettings


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
