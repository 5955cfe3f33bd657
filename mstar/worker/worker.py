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
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from mstar.ipc import messages as m
from mstar.ipc.settings_reload import apply_reloaded
from mstar.worker.lora_update import apply_lora_update

if TYPE_CHECKING:
    from mstar.engine.llm_engine import LLMEngine
    from mstar.engine.request.outputs import RequestOutput
    from mstar.models.families.parallel import TensorParallel
    from mstar.settings import WorkerSettings
    from mstar.worker.channel import WorkerChannel

log = structlog.get_logger(__name__)

IDLE_POLL_MS = 100
STATS_INTERVAL_S = 0.1


class Worker:
    def __init__(self, settings: WorkerSettings, index: int, channel: WorkerChannel,
                 parallel: TensorParallel | None = None):
        self.settings = settings
        self.index = index
        self.channel = channel
        self.parallel = parallel  # this process's rank when the replica is a tensor-parallel group
        self.engine: LLMEngine | None = None  # built by run(); its requests are the live ones
        self._last_stats: m.WorkerStats | None = None
        self._last_stats_at = 0.0

    def run(self) -> None:
        self.engine = self._load()
        try:
            running = True
            while running:
                running = self.take_commands()
                if running:
                    outputs = self.engine.step()
                    with self.engine.loop.timer.phase("publish"):
                        self.publish(outputs)
                self.report_stats()
        finally:
            self.engine.shutdown()

    def take_commands(self) -> bool:
        """Apply the commands in the inbox, waiting for one only when idle; False: shut down.
        Busy, the take is timed as the "inbox" phase (MSTAR_PHASE_TIMING)."""
        busy = self.engine.has_unfinished_requests()
        timer = self.engine.loop.timer
        with timer.phase("inbox") if busy else nullcontext():
            running = True
            for msg in self.channel.receive(0 if busy else IDLE_POLL_MS):
                running = self.handle(msg) and running
        return running

    def _load(self) -> LLMEngine:
        """Build the engine (weights, KV cache, warm-up), then tell the conductor we are ready."""
        from mstar.engine.llm_engine import LLMEngine

        start = time.perf_counter()
        engine = LLMEngine(self.settings, timer_label=self.index, parallel=self.parallel)
        seconds = time.perf_counter() - start
        rank = 0 if self.parallel is None else self.parallel.rank
        self.channel.admit_model(engine.vocab_size, engine.max_model_len)  # the inbox checks
        log.info("worker_loaded", worker=self.index, pid=os.getpid(), rank=rank,
                 seconds=round(seconds, 2), fingerprint=self.settings.fingerprint())
        self.channel.send_to_conductor(m.SetupDone(
            worker=self.index, pid=os.getpid(), fingerprint=self.settings.fingerprint(),
            model_name=Path(engine.model_name).name, max_model_len=engine.max_model_len,
            seconds=seconds, rank=rank))
        return engine

    def handle(self, msg: m.Message) -> bool:
        """Apply one command; False means shut down."""
        if isinstance(msg, m.AddRequest):
            self.add(msg)
        elif isinstance(msg, m.AbortRequests):
            for rid in msg.request_ids:  # one this worker no longer holds is ignored
                self.engine.abort_request(rid)
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
            self.engine.add_request(msg.request_id, prompt.token_ids, msg.params, prompt.images)
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
        s = self.engine.stats()
        stats = m.WorkerStats(self.index, s.running, s.waiting, round(s.kv_cache_usage, 4),
                              s.preemptions, s.encoder_cache_hits, s.encoder_cache_misses,
                              s.encoder_seconds, s.spec_method, s.spec_proposed, s.spec_accepted,
                              s.spec_propose_s, s.spec_verify_s, s.lora_loads, s.lora_evictions)
        if stats == self._last_stats:
            return
        now = time.monotonic()
        idle = s.running == 0 and s.waiting == 0
        if not (idle or self._last_stats is None or now - self._last_stats_at >= STATS_INTERVAL_S):
            return
        self._last_stats, self._last_stats_at = stats, now
        self.channel.send_to_api(stats)
