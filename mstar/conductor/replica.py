"""What the conductor knows of each replica: its ranks' processes or Ray actors (or, for a replica
on another host, only what it reported), their SETUP_DONE, and where its command socket listens."""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    import zmq

    from mstar.conductor.actor_rank import ActorRank
    from mstar.ipc import messages as m


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:  # a Ray actor that Ray reported dead (``ray_actor_died`` says why)
        return "is gone (no exit code: it was killed, or its node was lost)"
    if exitcode < 0:
        return f"was killed by {signal.Signals(-exitcode).name}"
    return f"died with exit code {exitcode}"


@dataclass
class RankProcess:
    """One process of a replica (rank 0 alone unless the replica is a tensor-parallel group);
    ``process`` is None for a replica on another host."""

    rank: int
    process: BaseProcess | ActorRank | None
    setup: m.SetupDone | None = None
    where: str = ""  # after the pid in its name: a Ray actor's id and node

    @property
    def pid(self) -> int | None:
        if self.process is not None:
            return self.process.pid
        return None if self.setup is None else self.setup.pid


@dataclass
class WorkerHandle:
    """One replica: one worker to the API server's placement, whatever its number of ranks.
    ``channel`` (the conductor's PUSH to it) is None and ``address`` (its rank 0's command socket)
    empty until a replica on another host joins."""

    index: int
    ranks: list[RankProcess]
    channel: zmq.Socket | None
    address: str

    def name(self, rank: RankProcess) -> str:
        which = f" rank {rank.rank}" if len(self.ranks) > 1 else ""
        return f"worker {self.index}{which} (pid {rank.pid}{rank.where})"

    @property
    def remote(self) -> bool:
        return self.ranks[0].process is None
