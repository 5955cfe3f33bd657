"""The API server's side of the messaging: submit to the conductor, route outputs to requests.

Outputs of one HTTP request's sub-requests (n > 1) share one asyncio queue. A fault reported by
the conductor (or the conductor process vanishing) fails every pending request at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
import zmq
import zmq.asyncio

from mstar.engine.outputs import RequestOutput
from mstar.engine.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.ipc.endpoints import Endpoints
from mstar.ipc.sockets import (
    MessageTooLarge,
    drain,
    dropped_frames,
    encode_for,
    pull_socket,
    push_socket,
    send,
)

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

log = structlog.get_logger(__name__)

POLL_MS = 200


@dataclass
class Failure:
    """Queued instead of an output when a request cannot complete."""

    status: int
    message: str
    param: str | None = None


class StartupError(Exception):
    pass


class EngineClient:
    def __init__(self, endpoints: Endpoints, conductor: BaseProcess):
        self.conductor = conductor
        self.ctx = zmq.Context()  # plain sockets: sends never block on PUSH, reads drain
        self.inbox = pull_socket(self.ctx, endpoints.api, endpoints.security, m.TO_API)
        self.inbox_waiter = zmq.asyncio.Socket.from_socket(self.inbox)  # awaits readability only
        self.to_conductor = push_socket(self.ctx, endpoints.conductor, endpoints.security)
        self.queues: dict[str, asyncio.Queue] = {}
        self.stats: dict[int, m.WorkerStats] = {}
        self.drops: dict[str, dict[str, int]] = {}  # process -> reason -> frames dropped
        self.failure: str | None = None
        self.failed = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _receive(self) -> list[m.Message]:
        if not await self.inbox_waiter.poll(POLL_MS):
            return []
        return drain(self.inbox)

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
        self._task.add_done_callback(self._dispatch_ended)

    def _dispatch_ended(self, task: asyncio.Task) -> None:
        """Supervision: the routing task must never end on its own while serving; if it dies,
        the server fails loudly (every pending request and /health get 503, the process exits
        non-zero) instead of hanging."""
        if task.cancelled() or self.failure is not None:
            return
        exc = task.exception()
        log.error("output_routing_failed", error=repr(exc), exc_info=exc)
        self._fail(f"output routing failed: {exc!r}")

    async def _dispatch(self) -> None:
        while self.failure is None:
            for msg in await self._receive():
                self._route(msg)
            if self.failure is None and not self.conductor.is_alive():
                self._fail(f"conductor exited with code {self.conductor.exitcode}")

    def _route(self, msg: m.Message) -> None:
        if isinstance(msg, m.Outputs):
            for out in msg.outputs:
                queue = self.queues.get(out.request_id)
                if queue is not None:
                    queue.put_nowait(out)
        elif isinstance(msg, m.WorkerStats):
            self.stats[msg.worker] = msg
        elif isinstance(msg, m.RequestFailed):
            queue = self.queues.get(msg.request_id)
            if queue is not None:
                queue.put_nowait(Failure(msg.status, msg.message, msg.param))
        elif isinstance(msg, m.Fatal):
            self._fail(msg.message)
        elif isinstance(msg, m.TransportDrops):
            self.drops[msg.process] = msg.counts

    def dropped_frames(self) -> dict[str, dict[str, int]]:
        """Frames dropped by every process's inbox, by process and reason."""
        return {**self.drops, "api_server": dropped_frames(self.inbox)}

    def _fail(self, message: str) -> None:
        log.error("serving_failed", reason=message, pending=len(self.queues))
        self.failure = message
        for queue in {id(q): q for q in self.queues.values()}.values():
            queue.put_nowait(Failure(503, message))
        self.failed.set()

    def submit(self, requests: list[tuple[str, list[int], SamplingParams]]) -> asyncio.Queue:
        """Send sub-requests to the conductor; their outputs arrive on the returned queue.

        Every sub-request is encoded before the first is sent, so a request that cannot be encoded
        sends nothing; if a send fails part-way, the ones already sent are aborted.
        """
        queue: asyncio.Queue[RequestOutput | Failure] = asyncio.Queue()
        if self.failure is not None:
            queue.put_nowait(Failure(503, self.failure))
            return queue
        try:
            frames = [(rid, encode_for(self.to_conductor, m.AddRequest(rid, ids, params)))
                      for rid, ids, params in requests]
        except MessageTooLarge as exc:
            queue.put_nowait(Failure(413, str(exc)))
            return queue
        sent: list[str] = []
        try:
            for rid, frame in frames:
                self.queues[rid] = queue
                self.to_conductor.send(frame, copy=False)
                sent.append(rid)
        except BaseException:
            self.release([rid for rid, _ in frames])
            self.abort(sent)
            raise
        return queue

    def release(self, request_ids: list[str]) -> None:
        """Stop routing outputs of these requests."""
        for rid in request_ids:
            self.queues.pop(rid, None)

    def send_control(self, msg: m.Message) -> None:
        """A control message for the conductor (which relays what concerns the workers)."""
        if self.failure is None:
            send(self.to_conductor, msg)

    def abort(self, request_ids: list[str]) -> None:
        """Abort requests in their worker, which frees their KV blocks at once."""
        if request_ids and self.failure is None:
            send(self.to_conductor, m.AbortRequests(list(request_ids)))

    async def shutdown(self, reason: str) -> None:
        """Stop routing and ask the conductor to stop the workers."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.conductor.is_alive():
            send(self.to_conductor, m.Shutdown(reason))

    def close(self) -> None:
        self.inbox_waiter.close()
        self.inbox.close()
        self.to_conductor.close()
        self.ctx.term()
