"""The API server's side of the messaging: submit to the conductor, route outputs to requests.

Outputs of one HTTP request's sub-requests (n > 1) share one asyncio queue. A fault reported by
the conductor (or the conductor process vanishing) fails every pending request at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import zmq
import zmq.asyncio

from mstar.conductor import messages as m
from mstar.conductor.endpoints import Endpoints

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

log = structlog.get_logger(__name__)

POLL_MS = 200


@dataclass
class Failure:
    """Queued instead of an output when a request cannot complete."""

    status: int
    message: str


class StartupError(Exception):
    pass


class EngineClient:
    def __init__(self, endpoints: Endpoints, conductor: BaseProcess):
        self.conductor = conductor
        self.ctx = zmq.asyncio.Context()
        self.inbox = self.ctx.socket(zmq.PULL)
        self.inbox.bind(endpoints.api)
        self.sync_ctx = zmq.Context()  # sends never block on PUSH: no futures to await
        self.to_conductor = self.sync_ctx.socket(zmq.PUSH)
        self.to_conductor.setsockopt(zmq.LINGER, 1000)
        self.to_conductor.connect(endpoints.conductor)
        self.queues: dict[str, asyncio.Queue] = {}
        self.stats: dict[int, m.WorkerStats] = {}
        self.failure: str | None = None
        self.failed = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _receive(self) -> list[Any]:
        if not await self.inbox.poll(POLL_MS):
            return []
        msgs = []
        while True:
            try:
                msgs.append(m.decode(self.inbox.recv(zmq.NOBLOCK).result()))
            except zmq.Again:
                return msgs

    async def wait_ready(self, timeout_s: float, stop: asyncio.Event) -> m.Ready | None:
        """The conductor's READY; None if `stop` was set first; StartupError on a fault."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not stop.is_set():
            for msg in await self._receive():
                if isinstance(msg, m.Ready):
                    return msg
                if isinstance(msg, m.Fatal):
                    raise StartupError(msg.message)
                if isinstance(msg, m.WorkerStats):
                    self.stats[msg.worker] = msg
            if not self.conductor.is_alive():
                raise StartupError(f"conductor exited with code {self.conductor.exitcode}")
            if asyncio.get_running_loop().time() > deadline:
                raise StartupError(f"workers not ready after startup_timeout_s={timeout_s}")
        return None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def _dispatch(self) -> None:
        while self.failure is None:
            for msg in await self._receive():
                self._route(msg)
            if self.failure is None and not self.conductor.is_alive():
                self._fail(f"conductor exited with code {self.conductor.exitcode}")

    def _route(self, msg: Any) -> None:
        if isinstance(msg, m.Outputs):
            for out in msg.outputs:
                queue = self.queues.get(out["request_id"])
                if queue is not None:
                    queue.put_nowait(out)
        elif isinstance(msg, m.WorkerStats):
            self.stats[msg.worker] = msg
        elif isinstance(msg, m.RequestFailed):
            queue = self.queues.get(msg.request_id)
            if queue is not None:
                queue.put_nowait(Failure(msg.status, msg.message))
        elif isinstance(msg, m.Fatal):
            self._fail(msg.message)

    def _fail(self, message: str) -> None:
        log.error("serving_failed", reason=message, pending=len(self.queues))
        self.failure = message
        for queue in {id(q): q for q in self.queues.values()}.values():
            queue.put_nowait(Failure(503, message))
        self.failed.set()

    def submit(self, requests: list[tuple[str, list[int], dict]]) -> asyncio.Queue:
        """Send sub-requests to the conductor; their outputs arrive on the returned queue."""
        queue: asyncio.Queue = asyncio.Queue()
        if self.failure is not None:
            queue.put_nowait(Failure(503, self.failure))
            return queue
        for request_id, prompt_ids, params in requests:
            self.queues[request_id] = queue
            self.to_conductor.send(m.encode(m.AddRequest(request_id, prompt_ids, params)))
        return queue

    def release(self, request_ids: list[str]) -> None:
        """Stop routing outputs of these requests."""
        for rid in request_ids:
            self.queues.pop(rid, None)

    def abort(self, request_ids: list[str]) -> None:
        """Abort requests in their worker, which frees their KV blocks at once."""
        if request_ids and self.failure is None:
            self.to_conductor.send(m.encode(m.AbortRequests(list(request_ids))))

    async def shutdown(self, reason: str) -> None:
        """Stop routing and ask the conductor to stop the workers."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.conductor.is_alive():
            self.to_conductor.send(m.encode(m.Shutdown(reason)))

    def close(self) -> None:
        self.inbox.close()
        self.to_conductor.close()
        self.ctx.term()
        self.sync_ctx.term()
