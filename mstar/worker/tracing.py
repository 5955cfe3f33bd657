"""A worker's spans of each traced request (MSTAR_OTLP_ENDPOINT set, and the request's
``AddRequest`` carrying the API server's trace context):

``mstar.worker.request`` (a child of the API server's request span), with children
``mstar.queue`` (arrival until the scheduler admits it), ``mstar.prefill`` (admission until its
first token) and ``mstar.decode`` (first token until it ends; one ``step`` event per engine step
that gave it tokens), and a ``scheduled`` event on the request span.

The worker observes the engine between steps (``observe``), so an admission is seen at the step
that ran it (its start); nothing here runs inside the engine, and with tracing off the worker
holds no ``WorkerTracing`` at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mstar.ipc.tracing import GEN_AI_SYSTEM, Tracing

if TYPE_CHECKING:
    from mstar.engine.request.outputs import RequestOutput
    from mstar.engine.request.sequence import Sequence


@dataclass
class Traced:
    request: Any  # the request's span
    phase: Any  # the open child span: queue, prefill or decode
    name: str  # which phase is open
    output_tokens: int = 0


class WorkerTracing:
    def __init__(self, tracing: Tracing, model: str, worker: int) -> None:
        self.tracing = tracing
        self.model = model
        self.worker = worker
        self.live: dict[str, Traced] = {}

    def added(self, request_id: str, traceparent: str, num_prompt_tokens: int,
              priority: int) -> None:
        request = self.tracing.start_span(
            "mstar.worker.request", traceparent, "INTERNAL",
            {"gen_ai.system": GEN_AI_SYSTEM, "gen_ai.request.model": self.model,
             "gen_ai.usage.input_tokens": num_prompt_tokens, "mstar.request_id": request_id,
             "mstar.worker": self.worker, "mstar.priority": priority})
        self.live[request_id] = Traced(request, self._child("mstar.queue", request), "queue")

    def _child(self, name: str, parent: Any, start_ns: int | None = None) -> Any:
        return self.tracing.start_span(name, parent, "INTERNAL", start_ns=start_ns)

    def observe(self, seqs: dict[str, Sequence], outputs: list[RequestOutput],
                step_start_ns: int) -> None:
        """After an engine step (which started at ``step_start_ns``): admissions, first tokens,
        decode steps and finishes of the traced requests."""
        for request_id, traced in self.live.items():
            if traced.name != "queue":
                continue
            seq = seqs.get(request_id)  # gone: it finished in this very step
            if seq is None or seq.num_computed_tokens > 0:
                traced.phase.end(step_start_ns)
                traced.request.add_event("scheduled", {}, step_start_ns)
                traced.phase = self._child("mstar.prefill", traced.request, step_start_ns)
                traced.name = "prefill"
        for out in outputs:
            traced = self.live.get(out.request_id)
            if traced is not None:
                self._output(out.request_id, traced, out)

    def _output(self, request_id: str, traced: Traced, out: RequestOutput) -> None:
        now = time.time_ns()
        if traced.name != "decode" and (out.new_token_ids or out.finished):
            traced.phase.end(now)
            traced.phase = self._child("mstar.decode", traced.request, now)
            traced.name = "decode"
        if out.new_token_ids:
            traced.output_tokens += len(out.new_token_ids)
            traced.phase.add_event("step", {"mstar.tokens": len(out.new_token_ids)}, now)
        if out.finished:
            self.end(request_id, out.finish_reason or "abort", out.num_cached_tokens)

    def end(self, request_id: str, reason: str, num_cached_tokens: int = 0) -> None:
        """The request finished (or was aborted, or failed): close its spans."""
        traced = self.live.pop(request_id, None)
        if traced is None:
            return
        traced.phase.end()
        traced.request.set_attribute("gen_ai.usage.output_tokens", traced.output_tokens)
        traced.request.set_attribute("gen_ai.response.finish_reasons", [reason])
        traced.request.set_attribute("mstar.num_cached_tokens", num_cached_tokens)
        traced.request.end()

    def shutdown(self) -> None:
        for request_id in list(self.live):
            self.end(request_id, "abort")
        self.tracing.shutdown()
