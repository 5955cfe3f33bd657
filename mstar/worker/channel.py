"""A worker's sockets: commands in from the conductor, outputs out to the API server."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, is_dataclass
from typing import Any

import zmq

from mstar.conductor import messages as m
from mstar.conductor.endpoints import Endpoints


class WorkerChannel:
    def __init__(self, endpoints: Endpoints, index: int):
        self.index = index
        self.ctx = zmq.Context()
        self.commands = self.ctx.socket(zmq.PULL)
        self.commands.bind(endpoints.workers[index])
        self.to_conductor = self._push(endpoints.conductor)
        self.to_api = self._push(endpoints.api)

    def _push(self, address: str) -> zmq.Socket:
        sock = self.ctx.socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.connect(address)
        return sock

    def receive(self, timeout_ms: int) -> list[Any]:
        """Every queued command, waiting up to timeout_ms for the first one."""
        if not self.commands.poll(timeout_ms):
            return []
        msgs = []
        while True:
            try:
                msgs.append(m.decode(self.commands.recv(zmq.NOBLOCK)))
            except zmq.Again:
                return msgs

    def setup_done(self, **fields: Any) -> None:
        self.to_conductor.send(m.encode(m.SetupDone(worker=self.index, **fields)))

    def requests_done(self, request_ids: Iterable[str]) -> None:
        ids = list(request_ids)
        if ids:
            self.to_conductor.send(m.encode(m.RequestsDone(worker=self.index, request_ids=ids)))

    def outputs(self, outputs: list[Any]) -> None:
        if outputs:
            dicts = [asdict(o) if is_dataclass(o) else dict(o) for o in outputs]
            self.to_api.send(m.encode(m.Outputs(outputs=dicts)))

    def request_failed(self, request_id: str, status: int, message: str) -> None:
        self.to_api.send(m.encode(m.RequestFailed(request_id, status, message)))

    def stats(self, running: int, waiting: int, kv_cache_usage: float) -> None:
        self.to_api.send(m.encode(m.WorkerStats(self.index, running, waiting, kv_cache_usage)))

    def close(self) -> None:
        for sock in (self.commands, self.to_conductor, self.to_api):
            sock.close()
        self.ctx.term()
