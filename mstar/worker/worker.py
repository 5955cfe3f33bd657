"""One engine replica: requests in from the API server and control from the conductor, engine
steps, outputs out to the API server.

The engine owns the step loop (serial or overlapped, see ``mstar.engine.step_loop``); the worker
only does the messaging around it: inbox -> add/abort, each step's outputs -> one message.
Messages are taken while the engine's step is in flight, so an overlapped step hides this work.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING

import structlog

from mstar.ipc import messages as m
from mstar.ipc.settings_reload import apply_reloaded
from mstar.ipc.tracing import Tracing
from mstar.models.loading.hub import served_name
from mstar.worker.lora_update import apply_lora_update
from mstar.worker.tracing import WorkerTracing

if TYPE_CHECKING:
    from mstar.engine.chain.speech_chain import SpeechChain
    from mstar.engine.llm_engine import LLMEngine
    from mstar.engine.request.outputs import RequestOutput
    from mstar.models.families.parallel import TensorParallel
    from mstar.models.speech.codec_node import CodecSeam
    from mstar.settings import WorkerSettings
    from mstar.worker.channel import WorkerChannel
    from mstar.worker.encoder_node import EncoderNodeProcess
    from mstar.worker.speech_out import SpeechOut

log = structlog.get_logger(__name__)

IDLE_POLL_MS = 100
STATS_INTERVAL_S = 0.1


class Worker:
    def __init__(self, settings: WorkerSettings, index: int, channel: WorkerChannel,
                 parallel: TensorParallel | None = None,
                 engine_cpus: tuple[int, ...] | None = None):
        """``engine_cpus``: MSTAR_CPU_BIND's CPUs for the engine's intra-op threads, in order."""
        self.settings = settings
        self.engine_cpus = engine_cpus
        self.index = index
        self.channel = channel
        self.parallel = parallel  # this process's rank when the replica is a tensor-parallel group
        self.engine: LLMEngine | None = None  # built by run(); its requests are the live ones
        self.nodes: dict[str, EncoderNodeProcess] = {}  # encoder nodes in their own processes
        self._last_stats: m.WorkerStats | None = None
        self._last_stats_at = 0.0
        self.tracing: WorkerTracing | None = None  # MSTAR_OTLP_ENDPOINT set: spans (run)
        self.speech: SpeechOut | None = None  # speech out's codec node (_load)
        # the model's codec node (speech out, the chain's code2wav), here or apart (_load)
        self.codec: CodecSeam | None = None
        # where requests go: the engine, or the chain that runs it with its talker and code2wav
        # (a model whose registry entry names a talker: mstar.engine.chain), chosen at load
        self.steps: LLMEngine | SpeechChain | None = None

    def run(self) -> None:
        self.engine = self._load()
        if self.speech is not None:  # chosen once at load: a text model publishes as it did
            speech = self.speech
            self.publish = lambda outputs: Worker.publish(self, speech.sound(outputs))
        tracing = Tracing.start(self.settings.otlp_endpoint, "mstar-worker")
        if tracing is not None:
            self.tracing = WorkerTracing(tracing, served_name(self.engine.model_name), self.index)
        try:
            running = True
            while running:
                running = self.take_commands()
                if running:
                    started = time.time_ns()
                    outputs = self.steps.step()
                    if self.tracing is not None:
                        self.tracing.observe(self.engine.seqs, outputs, started)
                    with self.engine.loop.timer.phase("publish"):
                        self.publish(outputs)
                self.report_stats()
        finally:
            self.steps.shutdown()
            for node in self.nodes.values():
                node.close()
            if self.codec is not None:
                self.codec.close()
            if self.tracing is not None:
                self.tracing.shutdown()

    def take_commands(self) -> bool:
        """Apply the commands in the inbox, waiting for one only when idle; False: shut down.
        Busy, the take is timed as the "inbox" phase (MSTAR_PHASE_TIMING)."""
        busy = self.steps.has_unfinished_requests()
        timer = self.engine.loop.timer
        with timer.phase("inbox") if busy else nullcontext():
            running = True
            for msg in self.channel.receive(0 if busy else IDLE_POLL_MS):
                running = self.handle(msg) and running
        return running

    def _load(self) -> LLMEngine:
        """Build the engine (weights, KV cache, warm-up), then tell the conductor we are ready."""
        from mstar.engine.llm_engine import LLMEngine
        from mstar.worker.encoder_node import encoders_apart, start_placed_nodes
        from mstar.worker.speech_out import codec_seam, speech_chain, speech_out

        start = time.perf_counter()
        apart = encoders_apart(self.settings)
        if apart:  # encoder nodes in processes of their own, before the engine that calls them
            # (the graph's other nodes placed apart start with their seams, after it); their
            # sockets take the instance's frame limit
            self.nodes = start_placed_nodes(self.settings, apart,
                                            self.channel.security.max_message_bytes)
        engine = LLMEngine(self.settings, timer_label=self.index, parallel=self.parallel,
                           placed_nodes=dict(self.nodes))
        if self.engine_cpus is not None:
            engine.bind_threads(self.engine_cpus)
        seconds = time.perf_counter() - start
        rank = 0 if self.parallel is None else self.parallel.rank
        # speech out (a graph emitting audio): the codec node runs on each step's frames, here or
        # in a process of its own (chosen once: codec_seam), before publishing
        # (mstar.worker.speech_out); its prompts are text tokens
        self.codec = codec_seam(engine, self.channel.security)
        self.speech = speech_out(engine, self.codec)
        self.steps = speech_chain(engine, self.codec, self.channel.security) or engine
        vocab = engine.vocab_size if self.speech is None else self.speech.prompt_vocab_size
        self.channel.admit_model(vocab, engine.max_model_len)  # the inbox checks
        log.info("worker_loaded", worker=self.index, pid=os.getpid(), rank=rank,
                 seconds=round(seconds, 2), fingerprint=self.settings.fingerprint())
        self.channel.send_to_conductor(m.SetupDone(
            worker=self.index, pid=os.getpid(), fingerprint=self.settings.fingerprint(),
            model_name=served_name(engine.model_name), max_model_len=engine.max_model_len,
            seconds=seconds, rank=rank))
        return engine

    def handle(self, msg: m.Message) -> bool:
        """Apply one command; False means shut down."""
        if isinstance(msg, m.AddRequest):
            self.add(msg)
        elif isinstance(msg, m.AbortRequests):
            for rid in msg.request_ids:  # one this worker no longer holds is ignored
                self.steps.abort_request(rid)
                if self.tracing is not None:
                    self.tracing.end(rid, "abort")
            if self.speech is not None:  # their codec state too
                self.speech.forget(msg.request_ids)
        elif isinstance(msg, m.LoraUpdate):
            self.channel.send_to_api(apply_lora_update(self.engine, msg, self.index))
        elif isinstance(msg, m.ReloadSettings):
            self.settings = apply_reloaded(self.settings, msg, f"worker {self.index}")
            self.engine.apply_settings(self.settings)
        elif isinstance(msg, m.Shutdown):
            log.info("worker_stopping", worker=self.index)
            return False
        return True

    def add(self, msg: m.AddRequest) -> None:
        try:
            prompt = msg.prompt()
            self.steps.add_request(msg.request_id, prompt.token_ids, msg.params, prompt.parts,
                                   msg.priority)
            if self.tracing is not None and msg.traceparent:
                self.tracing.added(msg.request_id, msg.traceparent, len(prompt.token_ids),
                                   msg.priority)
        except ValueError as exc:  # RequestRejected is a ValueError: it can never fit
            self.channel.send_to_api(m.RequestFailed(msg.request_id, getattr(exc, "status", 400),
                                                     str(exc), getattr(exc, "param", None)))

    def publish(self, outputs: list[RequestOutput]) -> None:
        """A step's rejected requests (before their abort output), then its outputs."""
        for rid, error in self.engine.take_rejected():
            self.channel.send_to_api(m.RequestFailed(rid, error.status, str(error), error.param))
        if outputs:
            self.channel.send_to_api(m.Outputs(outputs))

    def report_stats(self) -> None:
        """Send load gauges when they change (throttled), and always once idle."""
        s = self.steps.stats()
        stats = m.WorkerStats(self.index, s.running, s.waiting, round(s.kv_cache_usage, 4),
                              s.preemptions, s.encoder_cache_hits, s.encoder_cache_misses,
                              s.encoder_seconds, s.spec_method, s.spec_proposed, s.spec_accepted,
                              s.spec_propose_s, s.spec_verify_s, s.lora_loads, s.lora_evictions,
                              0 if self.codec is None else self.codec.held)
        if stats == self._last_stats:
            return
        now = time.monotonic()
        idle = s.running == 0 and s.waiting == 0
        if not (idle or self._last_stats is None or now - self._last_stats_at >= STATS_INTERVAL_S):
            return
        self._last_stats, self._last_stats_at = stats, now
        self.channel.send_to_api(stats)
