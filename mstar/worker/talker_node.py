"""Qwen3-Omni's talker in a process of its own (MSTAR_ENCODER_PLACEMENT ``talker=process``),
beside the worker that runs the thinker and the chained walk (``mstar.engine.chain``).

The worker starts it once its thinker's engine is built and hands the chain its handle
(``TalkerNodeProcess``, a ``talker_seam.Talker``); the process builds the talker's ``LLMEngine``
(``talker_engine_settings``: its own KV budget, MSTAR_TALKER_NUM_KV_BLOCKS) and runs its step
loop. Typed messages over the node's sockets (``node_process``), checked on arrival:

- in: ``TalkerAdd`` (the request's prefill rows, ``pad`` and params), ``TalkerRows`` (the rows its
  feed grew since the last send, and its finish), ``TalkerAbort``, ``Shutdown``;
- out: ``TalkerOutputs`` after each step that made outputs or changed the engine's load (its
  frames, finishes and finish reasons; its running, waiting, free blocks and preemptions, so the
  worker's gauges and /metrics count the talker's blocks), ``TalkerReady`` first.

The process keeps each request's ``RowFeed`` (rows as they arrive) and forgets it at the
request's finish or abort; rows for a request it no longer holds are dropped. When no step ran
(every request waits for its next row, ``feed_cut``) it waits on its inbox, not spinning. The
handle never waits for a talker step: the chain's step sends what the feeds grew and takes what
arrived (``step``), waiting a moment on the socket only when the chain has nothing else to do.
"""

from __future__ import annotations

import dataclasses

import structlog
import torch

from mstar.engine.engine_stats import EngineStats
from mstar.engine.request.outputs import RequestOutput
from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.ipc.lifecycle import exit_now
from mstar.ipc.parts import WireTensor, tensors_from_wire, tensors_to_wire
from mstar.ipc.sockets import receive, send
from mstar.models.speech.row_feed import RowFeed
from mstar.settings import WorkerSettings
from mstar.worker.node_process import POLL_MS, NodeProcess, node_child

log = structlog.get_logger(__name__)

NODE = "talker"
WAIT_MS = 10  # the chain's wait for the talker's outputs when it has nothing else to do


def _to_wire(tensor: torch.Tensor) -> WireTensor:
    return tensors_to_wire({"t": tensor.detach().cpu()})["t"]


def _from_wire(wire: WireTensor, device, dtype) -> torch.Tensor:
    return tensors_from_wire({"t": wire})["t"].to(device, dtype)


def main() -> None:
    """``python -m mstar.worker.talker_node ARCHITECTURE INBOX OUTBOX MAX_MESSAGE_BYTES``."""
    from mstar.engine.chain.speech_chain import talker_engine_settings
    from mstar.engine.llm_engine import LLMEngine

    settings, (architecture,), requests, replies = node_child(m.TO_TALKER_NODE)
    engine = LLMEngine(talker_engine_settings(settings), architecture=architecture)
    bm = engine.block_manager
    send(replies, m.TalkerReady(str(engine.device), str(engine.dtype).removeprefix("torch."),
                                engine.max_model_len, bm.num_blocks, bm.block_size))
    feeds: dict[str, RowFeed] = {}
    ran, last = True, None
    while True:
        busy = engine.has_unfinished_requests() and ran
        outputs = []  # those refused at their add, then the step's
        for msg in receive(requests, 0 if busy else POLL_MS):
            outputs += _apply(engine, feeds, msg)
        steps = _steps_taken(engine)
        if engine.has_unfinished_requests():
            outputs += engine.step()
        ran = _steps_taken(engine) != steps or engine.loop.in_flight
        for out in outputs:
            if out.finished:
                feeds.pop(out.request_id, None)
        s = engine.stats()
        load = (s.running, s.waiting, s.free_blocks, s.preemptions)
        if outputs or load != last:
            send(replies, m.TalkerOutputs(outputs, *load))
            last = load


def _steps_taken(engine) -> int:
    counters = engine.loop.counters
    return counters.fresh_steps + counters.continuations


def _apply(engine, feeds: dict[str, RowFeed], msg: m.Message) -> list[RequestOutput]:
    """One message from the worker; the abort output of a request refused at its add."""
    device, dtype = engine.device, engine.dtype
    if isinstance(msg, m.Shutdown):
        exit_now(0)
    elif isinstance(msg, m.TalkerAdd):
        feed = RowFeed(_from_wire(msg.prompt, device, dtype), _from_wire(msg.pad, device, dtype))
        try:  # the chain checked the fit at admission: a refusal here is a bug
            engine.add_request(msg.request_id, feed.placeholder_ids(), msg.params, feed=feed)
            feeds[msg.request_id] = feed
        except ValueError:
            log.exception("talker_refused", request_id=msg.request_id)
            return [RequestOutput(msg.request_id, finished=True, finish_reason="abort")]
    elif isinstance(msg, m.TalkerRows):
        feed = feeds.get(msg.request_id)
        if feed is None or feed.finished:  # ended here already (or its rows are complete)
            return []
        rows = _from_wire(msg.rows, device, dtype)
        if len(rows):
            feed.append(rows)
        if msg.finished:
            feed.finish()
    elif isinstance(msg, m.TalkerAbort):
        feeds.pop(msg.request_id, None)
        engine.abort_request(msg.request_id)
    return []


@dataclasses.dataclass
class _Sent:
    feed: RowFeed
    rows: int = 0  # rows sent so far
    finished: bool = False  # the finish sent


class TalkerNodeProcess(NodeProcess):
    """The worker's handle on the talker process: a ``talker_seam.Talker``."""

    def __init__(self, settings: WorkerSettings, architecture: str,
                 max_message_bytes: int) -> None:
        """``architecture``: the talker's registry entry (``ModelEntry.talker``)."""
        super().__init__(settings, NODE, "mstar.worker.talker_node", [architecture],
                         m.FROM_TALKER_NODE, m.TalkerReady, max_message_bytes)
        ready = self.ready
        self.device, self.dtype = torch.device(ready.device), getattr(torch, ready.dtype)
        self.max_model_len, self.num_blocks = ready.max_model_len, ready.num_blocks
        self.block_size = ready.block_size
        self.held: dict[str, _Sent] = {}  # requests added and not finished or aborted
        self.arrived: list[RequestOutput] = []  # outputs taken between steps (``stats``)
        self.load = m.TalkerOutputs([], 0, 0, self.num_blocks, 0)
        log.info("talker_node_ready", pid=self.proc.pid, num_blocks=self.num_blocks)

    def blocks_needed(self, positions: int) -> int:
        return -(-positions // self.block_size)

    def add(self, request_id: str, feed: RowFeed, params: SamplingParams) -> None:
        self.send(m.TalkerAdd(request_id, _to_wire(feed.prompt), _to_wire(feed.pad), params))
        self.held[request_id] = _Sent(feed)

    def step(self, wait: bool) -> list[RequestOutput]:
        self._send_rows()
        self._take(WAIT_MS if wait and not self.arrived else 0)
        outputs, self.arrived = self.arrived, []
        return outputs

    def _send_rows(self) -> None:
        """What each feed grew since the last send (its finish too)."""
        for rid, sent in self.held.items():
            feed = sent.feed
            if len(feed.rows) == sent.rows and feed.finished == sent.finished:
                continue
            new = feed.rows[sent.rows:]
            rows = torch.stack(new) if new else feed.pad.new_zeros((0, len(feed.pad)))
            self.send(m.TalkerRows(rid, _to_wire(rows), feed.finished))
            sent.rows, sent.finished = len(feed.rows), feed.finished

    def _take(self, timeout_ms: int) -> None:
        """The process's messages (waiting up to ``timeout_ms``): outputs of held requests
        (those of aborted ones are dropped), and its latest load."""
        for msg in self.receive(timeout_ms):
            self.load = msg
            for out in msg.outputs:
                if out.request_id not in self.held:
                    continue
                if out.finished:
                    del self.held[out.request_id]
                self.arrived.append(out)

    def abort_request(self, request_id: str) -> None:
        if self.held.pop(request_id, None) is not None:
            self.send(m.TalkerAbort(request_id))

    def has_unfinished_requests(self) -> bool:
        return bool(self.held or self.arrived)

    def stats(self) -> EngineStats:
        """The process's latest load (what arrived without waiting)."""
        self._take(0)
        s = self.load
        return EngineStats(s.running, s.waiting, s.free_blocks,
                           1.0 - s.free_blocks / self.num_blocks, s.preemptions)

    def shutdown(self) -> None:
        self.close()


if __name__ == "__main__":
    main()
