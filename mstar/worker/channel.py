"""A worker's sockets: requests (API server) and control (conductor) in, outputs out to the API
server, readiness to the conductor."""

from __future__ import annotations

import zmq

from mstar.ipc.endpoints import Endpoints
from mstar.ipc.messages import TO_WORKER, Message
from mstar.ipc.sockets import drops_report, pull_socket, push_socket, receive, send


class WorkerChannel:
    def __init__(self, endpoints: Endpoints, index: int):
        self.ctx = zmq.Context()
        self.name = f"worker {index}"
        security = endpoints.security
        self.commands = pull_socket(self.ctx, endpoints.workers[index], security, TO_WORKER)
        self.to_conductor = push_socket(self.ctx, endpoints.conductor, security)
        self.to_api = push_socket(self.ctx, endpoints.api, security)

    def receive(self, timeout_ms: int) -> list[Message]:
        msgs = receive(self.commands, timeout_ms)
        report = drops_report(self.commands, self.name)
        if report is not None:
            send(self.to_api, report)
        return msgs

    def send_to_conductor(self, msg: Message) -> None:
        send(self.to_conductor, msg)

    def send_to_api(self, msg: Message) -> None:
        send(self.to_api, msg)

    def close(self) -> None:
        for sock in (self.commands, self.to_conductor, self.to_api):
            sock.close()
        self.ctx.term()
