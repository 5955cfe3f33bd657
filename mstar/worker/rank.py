"""The channels of a tensor-parallel group's ranks (see ``mstar.engine.distributed``).

Rank 0 (the leader) holds the replica's command socket; every message batch it takes is broadcast
to the other ranks (followers) before the worker applies it, so every rank applies the same
messages before the same engine step. Followers report only their readiness (SETUP_DONE, for the
conductor's fingerprint check); outputs, stats and request accounting are the leader's to send.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import zmq

from mstar.engine.distributed import RankGroup, broadcast_inputs, join_group
from mstar.engine.placement import place_rank, resolve_device
from mstar.engine.rendezvous import Rendezvous, check_deterministic_loop
from mstar.ipc import messages as m
from mstar.ipc.sockets import push_socket, send
from mstar.worker.channel import WorkerChannel

if TYPE_CHECKING:
    from mstar.ipc.endpoints import Endpoints
    from mstar.settings import WorkerSettings


class LeaderChannel:
    def __init__(self, channel: WorkerChannel, group: RankGroup):
        self.channel = channel
        self.group = group
        self.security = channel.security  # the frame limit, as every channel has (nodes apart)

    def receive(self, timeout_ms: int) -> list[m.Message]:
        return broadcast_inputs(self.group, self.channel.receive(timeout_ms))

    def admit_model(self, vocab_size: int, max_model_len: int) -> None:
        self.channel.admit_model(vocab_size, max_model_len)

    def send_to_conductor(self, msg: m.Message) -> None:
        self.channel.send_to_conductor(msg)

    def send_to_api(self, msg: m.Message) -> None:
        self.channel.send_to_api(msg)

    def close(self) -> None:
        self.channel.close()


class FollowerChannel:
    def __init__(self, endpoints: Endpoints, group: RankGroup):
        self.group = group
        self.security = endpoints.security  # the frame limit, as every channel has
        self.ctx = zmq.Context()
        self.to_conductor = push_socket(self.ctx, endpoints.conductor, endpoints.security)

    def receive(self, timeout_ms: int) -> list[m.Message]:
        return broadcast_inputs(self.group, None)

    def admit_model(self, vocab_size: int, max_model_len: int) -> None:
        pass  # a follower takes its messages from the leader, which checked them

    def send_to_conductor(self, msg: m.Message) -> None:
        if isinstance(msg, m.SetupDone):
            send(self.to_conductor, msg)

    def send_to_api(self, msg: m.Message) -> None:
        pass

    def close(self) -> None:
        self.to_conductor.close()
        self.ctx.term()


def join_rank(settings: WorkerSettings, index: int, endpoints: Endpoints,
              rendezvous: Rendezvous | None):
    """(channel, group) of this process: placed on its device, joined to its group if any."""
    rank = 0 if rendezvous is None else rendezvous.rank
    place_rank(settings, index, rank)
    if rendezvous is None:
        return WorkerChannel(settings, endpoints, index), None
    check_deterministic_loop(settings)
    device = resolve_device(settings)
    group = join_group(rendezvous, device, settings.startup_timeout_s)
    if rank == 0:
        return LeaderChannel(WorkerChannel(settings, endpoints, index), group), group
    return FollowerChannel(endpoints, group), group
