"""The API server's side of the messaging: requests straight to the workers, text back to routes.

``live`` is the process's one registry of live requests: each sub-request's sink (shared by the
sub-requests of one HTTP request, n > 1: ``generation.unread.Pump``, which takes each output as
it is routed), its text state and its replica. Requests go to the
replica ``routing.Router`` chooses (``place``: by cached prefix, bounded by load; or by load
alone). Workers' outputs carry token ids only; each received batch is turned into text
(``mstar.output``) on the event loop, as it arrives. A stop string found there aborts its request
in the worker.

The inbox is watched with the loop's own reader on the socket's file descriptor
(``loop.add_reader``) plus a tick every ``POLL_MS`` (the conductor's liveness). Once serving
(``start``), the reader's callback routes what it drains there and then: no task, future, poller
or thread per received batch. At one stream a batch is one token, and every hop was paid per
token: zmq.asyncio's poll, a detokenizing thread, then a routing task woken by an event, were
about half of the API server's CPU per token there, taken from the two cores the worker decodes on
(docs/worker_loop.rst, "Served against offline at a 5 ms step").

A fault reported by the conductor (or the conductor process vanishing, looked at on each tick)
fails every pending request at once, as does a fault in routing itself.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import structlog
import zmq

from mstar.api_server.context.caller import current_caller
from mstar.api_server.generation.replica_health import ReplicaHealth
from mstar.api_server.generation.routing import Router
from mstar.engine.request.outputs import RequestOutput
from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.ipc.endpoints import Endpoints
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.sockets import (
    POLLIN,
    MessageTooLarge,
    drain,
    dropped_frames,
    encode_within,
    pull_socket,
    push_socket,
    send,
)
from mstar.output.processor import RequestText, TextOutput, ends_in_engine, to_texts
from mstar.prompt.value import Prompt

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


class Sink(Protocol):
    """Where one HTTP request's outputs go, called on the event loop as they are routed: its
    ``generation.unread.Pump`` (an ``asyncio.Queue`` is one too)."""

    def put_nowait(self, item: TextOutput | Failure) -> None: ...


@dataclass
class LiveRequest:
    """A sub-request between submit and release: where its outputs go, its text, its replica."""

    sink: Sink
    text: RequestText
    worker: int


class EngineClient:
    def __init__(self, endpoints: Endpoints, conductor: BaseProcess, tokenizer: Any,
                 router: Router | None = None):
        self.conductor = conductor
        # the replica choice (MSTAR_ROUTE_POLICY); without settings (tests), by load alone
        self.router = router or Router("least_loaded", 1, 1)
        self.tokenizer = tokenizer
        self.ctx = zmq.Context()  # plain sockets: sends never block on PUSH, reads drain
        self.inbox = pull_socket(self.ctx, endpoints.api, endpoints.security, m.TO_API,
                                 InboxBounds(replicas=len(endpoints.workers)))
        # before ``start``: set by the inbox's reader and by the tick (``_receive``: start-up)
        self.readable = asyncio.Event()
        self._tick: asyncio.TimerHandle | None = None  # the watch's POLL_MS tick; None: unwatched
        self.routing = False  # serving: the reader and the tick route what they drain (``start``)
        self.to_conductor = push_socket(self.ctx, endpoints.conductor, endpoints.security)
        self.security = endpoints.security
        self.to_workers: list[zmq.Socket] = []  # replica i's rank 0, connected at READY
        self.load: list[int] = []  # live requests per replica (counted from ``live``)
        self.live: dict[str, LiveRequest] = {}
        self.stats: dict[int, m.WorkerStats] = {}
        self.replicas = ReplicaHealth(len(endpoints.workers))  # down ones, as the conductor says
        self.drops: dict[str, dict[str, int]] = {}  # process -> reason -> frames dropped
        self.failure: str | None = None
        self.failed = asyncio.Event()
        # run-time LoRA updates in flight: update id -> (replies, replicas asked, done)
        self.lora_updates: dict[str, tuple[list[m.LoraUpdated], int, asyncio.Future]] = {}

    def _watch(self) -> None:
        """Look at the inbox when it may hold messages, and at least every POLL_MS."""
        if self._tick is not None:
            return
        loop = asyncio.get_running_loop()
        loop.add_reader(self.inbox.FD, self._on_inbox)
        self._tick = loop.call_later(POLL_MS / 1000, self._on_tick)

    def _unwatch(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
            asyncio.get_running_loop().remove_reader(self.inbox.FD)

    def _on_inbox(self) -> None:
        # zmq's descriptor signals a change of state, not a message: reading EVENTS resets it, and
        # says whether a message is there (a drain then takes every one: no later signal would)
        if self.routing:
            self._route_inbox()
        elif self.inbox.get(zmq.EVENTS) & POLLIN:
            self.readable.set()

    def _on_tick(self) -> None:
        self._tick = asyncio.get_running_loop().call_later(POLL_MS / 1000, self._on_tick)
        if not self.routing:
            self.readable.set()
            return
        if self.failure is None and not self.conductor.is_alive():  # a wait for the process
            self._fail(f"conductor exited with code {self.conductor.exitcode}")
        self._route_inbox()

    async def _receive(self) -> list[m.Message]:
        """The queued messages; waits for one or for the tick (then returns what there is)."""
        self._watch()
        self.readable.clear()  # before draining: a message after the drain sets it again
        msgs = drain(self.inbox)
        if msgs:
            return msgs
        await self.readable.wait()
        return drain(self.inbox)

    async def wait_ready(self, timeout_s: float, stop: asyncio.Event) -> m.Ready | None:
        """The conductor's READY; None if `stop` was set first; StartupError on a fault."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not stop.is_set():
            for msg in await self._receive():
                if isinstance(msg, m.Ready):
                    self.connect(msg.worker_addresses)
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

    def connect(self, addresses: list[str]) -> None:
        """One PUSH to each replica's command socket (rank 0 of a tensor-parallel group)."""
        if not addresses:
            raise StartupError("the conductor's READY names no worker address")
        self.to_workers = [push_socket(self.ctx, address, self.security) for address in addresses]
        self.load = [0] * len(addresses)

    def start(self) -> None:
        """Serve: from now on the inbox's reader routes each message as it arrives."""
        self._watch()
        self.routing = True
        self._route_inbox()  # whatever came between READY and now

    def _route_inbox(self) -> None:
        """Route every queued message, on the loop (the inbox's reader, the tick).

        Supervision: routing must not fail while serving; if it does, the server fails loudly
        (every pending request and /health get 503, the process exits non-zero) instead of
        hanging. After a failure the inbox is still drained (its descriptor stays reset), and
        what comes is dropped."""
        try:
            msgs = drain(self.inbox)
            if self.failure is not None:
                return
            work: list[tuple[LiveRequest, RequestOutput]] = []
            for msg in msgs:
                if isinstance(msg, m.Outputs):
                    work += [(entry, out) for out in msg.outputs
                             if (entry := self.live.get(out.request_id)) is not None]
                else:
                    self._route(msg)
            if work:
                self._deliver(work)
        except Exception as exc:
            log.error("output_routing_failed", error=repr(exc), exc_info=exc)
            if self.failure is None:
                self._fail(f"output routing failed: {exc!r}")

    def _deliver(self, work: list[tuple[LiveRequest, RequestOutput]]) -> None:
        """Text for one received batch, then to the requests' sinks."""
        texts = to_texts([(entry.text, out) for entry, out in work])
        stopped = []
        for (entry, out), text in zip(work, texts, strict=True):
            if out.finished:
                self.router.observe(entry.worker, out.num_cached_tokens)
            if text is None:  # ended at a stop string: the worker's abort is on its way
                continue
            if ends_in_engine(text, out):
                stopped.append(text.request_id)
            entry.sink.put_nowait(text)
        self.abort(stopped)

    def _route(self, msg: m.Message) -> None:
        if isinstance(msg, m.WorkerStats):
            self.stats[msg.worker] = msg
        elif isinstance(msg, m.RequestFailed):
            entry = self.live.get(msg.request_id)
            if entry is not None:
                entry.sink.put_nowait(Failure(msg.status, msg.message, msg.param))
        elif isinstance(msg, m.Fatal):
            self._fail(msg.message)
        elif isinstance(msg, m.LoraUpdated):
            self._lora_reply(msg)
        elif isinstance(msg, m.TransportDrops):
            self.drops[msg.process] = msg.counts
        elif isinstance(msg, m.Liveness):
            newly_down = self.replicas.update(msg)
            for entry in [e for e in self.live.values() if e.worker in newly_down]:
                entry.sink.put_nowait(Failure(503, newly_down[entry.worker]))

    def dropped_frames(self) -> dict[str, dict[str, int]]:
        """Frames dropped by every process's inbox, by process and reason."""
        return {**self.drops, "api_server": dropped_frames(self.inbox)}

    def sinks(self) -> list[Sink]:
        """The sink of every pending HTTP request (once each)."""
        return list({id(e.sink): e.sink for e in self.live.values()}.values())

    def _fail(self, message: str) -> None:
        log.error("serving_failed", reason=message, pending=len(self.live))
        self.failure = message
        for sink in self.sinks():
            sink.put_nowait(Failure(503, message))
        self.failed.set()

    def place(self, prompt: Prompt, params: SamplingParams) -> int:
        return self.router.choose(prompt.token_ids, params.lora, self.load, self.stats,
                                  self.replicas.up())

    def submit(self, requests: list[tuple[str, Prompt, SamplingParams]], sink: Sink) -> None:
        """Send sub-requests to their replicas; their text outputs (or a ``Failure``) go to
        ``sink``, as they arrive. Each carries the current request's priority class and trace
        context (its ``Caller``).

        Every sub-request is encoded before the first is sent, so a request that cannot be encoded
        sends nothing; if a send fails part-way, the ones already sent are aborted.
        """
        failure = self.failure or self.replicas.unavailable()
        if failure is not None:
            sink.put_nowait(Failure(503, failure))
            return
        caller = current_caller()
        priority, traceparent = caller.priority, caller.traceparent()
        try:
            frames = [(rid, prompt, params,
                       encode_within(self.security.max_message_bytes,
                                     m.AddRequest.of(rid, prompt, params, priority, traceparent)))
                      for rid, prompt, params in requests]
        except MessageTooLarge as exc:
            sink.put_nowait(Failure(413, str(exc)))
            return
        sent: list[str] = []
        try:
            for rid, prompt, params, frame in frames:
                worker = self.place(prompt, params)
                self.live[rid] = LiveRequest(
                    sink, RequestText(self.tokenizer, prompt.token_ids, params), worker)
                self.load[worker] += 1
                self.to_workers[worker].send(frame, copy=False)
                sent.append(rid)
        except BaseException:
            self.abort(sent)
            self.release([rid for rid, *_ in frames])
            raise

    def release(self, request_ids: list[str]) -> None:
        """Forget these requests (after ``abort`` for those that did not finish)."""
        for rid in request_ids:
            entry = self.live.pop(rid, None)
            if entry is not None:
                self.load[entry.worker] -= 1

    def send_control(self, msg: m.Message) -> None:
        """A control message for the conductor (which relays what concerns the workers)."""
        if self.failure is None:
            send(self.to_conductor, msg)

    async def update_lora(self, name: str, path: str, timeout_s: float) -> list[m.LoraUpdated]:
        """Load (``path`` set) or unload an adapter on every live replica; their answers (a
        replica that does not answer within ``timeout_s`` counts as a 503)."""
        update_id = uuid.uuid4().hex
        asked = [w for w in range(len(self.to_workers)) if w not in self.replicas.down]
        if not asked:
            return [m.LoraUpdated("", -1, 503, "no replica is up")]
        done = asyncio.get_running_loop().create_future()
        self.lora_updates[update_id] = ([], len(asked), done)
        try:
            for worker in asked:
                send(self.to_workers[worker], m.LoraUpdate(update_id, name, path))
            return await asyncio.wait_for(done, timeout_s)
        except TimeoutError:
            return [m.LoraUpdated(update_id, -1, 503, "a replica did not answer in time")]
        finally:
            self.lora_updates.pop(update_id, None)

    def _lora_reply(self, msg: m.LoraUpdated) -> None:
        pending = self.lora_updates.get(msg.update_id)
        if pending is None:
            return
        replies, asked, done = pending
        replies.append(msg)
        if len(replies) == asked and not done.done():
            done.set_result(replies)

    def abort(self, request_ids: list[str]) -> None:
        """Abort live requests in their replicas, which free their KV blocks at once."""
        if self.failure is not None:
            return
        by_worker: dict[int, list[str]] = {}
        for rid in request_ids:
            entry = self.live.get(rid)
            if entry is not None:
                by_worker.setdefault(entry.worker, []).append(rid)
        for worker, ids in by_worker.items():
            if worker not in self.replicas.down:  # a dead peer's queue would fill, then block
                send(self.to_workers[worker], m.AbortRequests(ids))

    async def shutdown(self, reason: str) -> None:
        """Stop routing and ask the conductor to stop the workers."""
        self.routing = False
        self._unwatch()
        if self.conductor.is_alive():
            send(self.to_conductor, m.Shutdown(reason))

    def close(self) -> None:
        for sock in (self.inbox, self.to_conductor, *self.to_workers):
            sock.close()
        self.ctx.term()
