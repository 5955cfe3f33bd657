"""A worker's sockets: requests (API server) and control (conductor) in, outputs out to the API
server, readiness to the conductor.

The command inbox checks every message (``mstar.ipc.inbox_checks``): reloads against the
settings, requests against the model's vocabulary and context length, which it learns from
``admit_model`` once the engine is loaded (no request is admitted before)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import zmq

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.messages import TO_WORKER, Message
from mstar.ipc.sockets import drops_report, pull_socket, push_socket, receive, send

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings


class WorkerChannel:
    def __init__(self, settings: WorkerSettings, endpoints: Endpoints, index: int):
        self.ctx = zmq.Context()
        self.name = f"worker {index}"
        security = self.security = endpoints.security  # node processes (placed) use it too
        self.commands = pull_socket(self.ctx, endpoints.workers[index], security, TO_WORKER,
                                    InboxBounds.of(settings))
        self.to_conductor = push_socket(self.ctx, endpoints.conductor, security)
        self.to_api = push_socket(self.ctx, endpoints.api, security)

    def receive(self, timeout_ms: int) -> list[Message]:
        msgs = receive(self.commands, timeout_ms)
        report = drops_report(self.commands, self.name)
        if report is not None:
            send(self.to_api, report)
        return msgs

    def admit_model(self, vocab_size: int, max_model_len: int) -> None:
        """Requests are admitted from now on: token ids below ``vocab_size``, prompts of at most
        ``max_model_len`` tokens."""
        self.commands.bounds = dataclasses.replace(self.commands.bounds, vocab_size=vocab_size,
                                                   max_model_len=max_model_len)

    def send_to_conductor(self, msg: Message) -> None:
        send(self.to_conductor, msg)

    def send_to_api(self, msg: Message) -> None:
        send(self.to_api, msg)

    def close(self) -> None:
        for sock in (self.commands, self.to_conductor, self.to_api):
            sock.close()
        self.ctx.term()
