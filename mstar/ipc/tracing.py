"""OpenTelemetry for every process: one tracer provider per process, exporting over OTLP/HTTP to
MSTAR_OTLP_ENDPOINT, and the W3C trace context that links one request's spans across processes
(the API server sends it in ``AddRequest.traceparent``).

Nothing here imports OpenTelemetry until ``Tracing.start`` is called, and the processes call it
only when MSTAR_OTLP_ENDPOINT is set: with tracing off, OpenTelemetry is never imported.
Spans are batched and exported off the hot path (``EXPORT_DELAY_MS``); ``shutdown`` flushes them.
"""

from __future__ import annotations

from typing import Any

EXPORT_DELAY_MS = 500  # how long a finished span may wait in the batch before it is exported
TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path under the collector's base URL
GEN_AI_SYSTEM = "mstar"


class Tracing:
    """One process's tracer (``tracer``) and its provider; build with ``start``."""

    def __init__(self, provider: Any, tracer: Any) -> None:
        self.provider = provider
        self.tracer = tracer

    @classmethod
    def start(cls, endpoint: str | None, service: str) -> Tracing | None:
        """Tracing to ``endpoint`` (a base URL) as ``service``; None when the endpoint is unset."""
        if endpoint is None:
            return None
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + TRACES_PATH)
        provider.add_span_processor(BatchSpanProcessor(exporter,
                                                       schedule_delay_millis=EXPORT_DELAY_MS))
        return cls(provider, provider.get_tracer("mstar"))

    def start_span(self, name: str, parent: str | Any = "", kind: str = "INTERNAL",
                   attributes: dict[str, Any] | None = None, start_ns: int | None = None) -> Any:
        """A started span. ``parent``: a W3C traceparent string ("" or invalid: a new trace),
        or a parent span."""
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if isinstance(parent, str):
            context = TraceContextTextMapPropagator().extract({"traceparent": parent}) \
                if parent else None
        else:
            context = trace.set_span_in_context(parent)
        return self.tracer.start_span(name, context=context, kind=getattr(trace.SpanKind, kind),
                                      attributes=attributes, start_time=start_ns)

    @staticmethod
    def traceparent(span: Any) -> str:
        """The W3C trace context naming ``span`` as the parent, for another process."""
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
        return carrier.get("traceparent", "")

    @staticmethod
    def fail(span: Any, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, message))

    def shutdown(self) -> None:
        """Export what is batched, then stop."""
        self.provider.shutdown()
