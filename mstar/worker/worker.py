"""One engine replica: takes requests from the conductor, steps the engine, streams outputs.

Messaging lives in ``WorkerChannel``; this class owns the engine and applies commands; the
overlapped step loop lives in ``mstar.worker.step_loop``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from mstar.conductor import messages as m

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings
    from mstar.worker.channel import WorkerChannel

log = structlog.get_logger(__name__)

STATS_INTERVAL_S = 0.1


class Worker:
    def __init__(self, settings: WorkerSettings, index: int, channel: WorkerChannel):
        self.settings = settings
        self.index = index
        self.channel = channel
        self.engine: Any = None
        self.loop: Any = None  # the StepLoop, once run() has built the engine
        self.live: set[str] = set()  # request ids this worker holds
        self._last_stats: tuple | None = None
        self._last_stats_at = 0.0

    def run(self) -> None:
        from mstar.worker.step_loop import StepLoop

        self.setup()
        self.loop = StepLoop(self)
        self.loop.run()

    def setup(self) -> None:
        """Build the engine (weights, KV cache, warm-up), then tell the conductor we are ready."""
        from mstar.engine.llm_engine import LLMEngine

        start = time.perf_counter()
        self.engine = LLMEngine(self.settings)
        seconds = time.perf_counter() - start
        log.info("worker_loaded", worker=self.index, pid=os.getpid(), seconds=round(seconds, 2))
        self.channel.setup_done(
            pid=os.getpid(), fingerprint=self.settings.fingerprint(),
            model_name=Path(self.engine.model_name).name, max_model_len=self.engine.max_model_len,
            seconds=seconds)
        self.report_stats(force=True)

    def handle(self, msg: Any, defer_aborts: list[str]) -> bool:
        """Apply one command; False means shut down.

        Aborts are collected in ``defer_aborts``: the step loop applies them once the step in flight
        is done, so no block is freed while a forward still writes to it.
        """
        if isinstance(msg, m.AddRequest):
            self.add(msg)
        elif isinstance(msg, m.AbortRequests):
            defer_aborts.extend(msg.request_ids)
        elif isinstance(msg, m.Shutdown):
            log.info("worker_stopping", worker=self.index)
            return False
        return True

    def abort(self, request_ids: list[str]) -> None:
        """Abort requests this worker holds; their blocks are freed at once."""
        aborted = [rid for rid in request_ids if rid in self.live]
        for rid in aborted:
            self.engine.abort_request(rid)
            self.live.discard(rid)
        self.channel.requests_done(aborted)

    def add(self, msg: m.AddRequest) -> None:
        from mstar.engine.sampling_params import SamplingParams

        try:
            params = SamplingParams.from_dict(msg.params)
            self.engine.add_request(msg.request_id, msg.prompt_token_ids, params)
        except ValueError as exc:  # RequestRejected is a ValueError: it can never fit
            self.channel.request_failed(msg.request_id, 400, str(exc))
            self.channel.requests_done([msg.request_id])
            return
        self.live.add(msg.request_id)

    def publish(self, outputs: list[Any]) -> None:
        self.channel.outputs(outputs)
        done = [o.request_id for o in outputs if o.finished and o.request_id in self.live]
        self.live.difference_update(done)
        self.channel.requests_done(done)

    def report_stats(self, force: bool = False) -> None:
        """Send load gauges when they change (throttled), and always once idle."""
        engine = self.engine
        stats = (engine.num_running(), engine.num_waiting(), round(engine.kv_cache_usage(), 4))
        now = time.monotonic()
        idle = stats[0] == 0 and stats[1] == 0
        if stats == self._last_stats and not force:
            return
        if not (force or idle or now - self._last_stats_at >= STATS_INTERVAL_S):
            return
        self._last_stats, self._last_stats_at = stats, now
        self.channel.stats(*stats)
