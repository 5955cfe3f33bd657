"""A worker's sockets: requests (API server) and control (conductor) in, outputs out to the API
server, readiness to the conductor."""

from __future__ import annotations

import zmq

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.messages import Message
from mstar.ipc.sockets import pull_socket, push_socket, receive, send


class WorkerChannel:
    def __init__(self, endpoints: Endpoints, index: int):
        self.ctx = zmq.Context()
        self.commands = pull_socket(self.ctx, endpoints.workers[index])
        self.to_conductor = push_socket(self.ctx, endpoints.conductor)
        self.to_api = push_socket(self.ctx, endpoints.api)

    def receive(self, timeout_ms: int) -> list[Message]:
        return receive(self.commands, timeout_ms)

    def send_to_conductor(self, msg: Message) -> None:
        send(self.to_conductor, msg)

    def send_to_api(self, msg: Message) -> None:
        send(self.to_api, msg)

    def close(self) -> None:
        for sock in (self.commands, self.to_conductor, self.to_api):
            sock.close()
        self.ctx.term()
