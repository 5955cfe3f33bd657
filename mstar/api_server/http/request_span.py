"""The API server's span of one HTTP request (MSTAR_OTLP_ENDPOINT set): the root of the request's
trace, or a child of the client's when it sent a ``traceparent`` header. The workers' spans of its
sub-requests are its children (``mstar.worker.tracing``).

Attributes follow OpenTelemetry's HTTP and GenAI semantic conventions: the operation, the model,
the token usage and the finish reasons.
"""

from __future__ import annotations

from typing import Any

from mstar.ipc.tracing import GEN_AI_SYSTEM, Tracing

# The GenAI operation of each generation route (gen_ai.operation.name).
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion",
              "/v1/embeddings": "embeddings", "/v1/messages": "chat", "/v1/responses": "chat",
              "/generate": "text_completion"}


class RequestSpan:
    """Lives from admission to the response's last byte; ``Caller`` feeds it usage."""

    def __init__(self, tracing: Tracing, scope: dict, headers: dict[bytes, bytes], route: str,
                 key_name: str) -> None:
        self.tracing = tracing
        operation = OPERATIONS.get(route, "http")
        parent = headers.get(b"traceparent", b"").decode("latin-1")
        self.span = tracing.start_span(
            f"{scope.get('method', 'GET')} {route}", parent, "SERVER",
            {"http.request.method": scope.get("method", ""), "url.path": scope["path"],
             "http.route": route, "gen_ai.operation.name": operation,
             "gen_ai.system": GEN_AI_SYSTEM, "mstar.api_key.name": key_name})
        self.prompt = 0
        self.completion = 0
        self.reasons: list[str] = []

    def traceparent(self) -> str:
        return self.tracing.traceparent(self.span)

    def model(self, name: str) -> None:
        self.span.set_attribute("gen_ai.request.model", name)
        self.span.set_attribute("gen_ai.response.model", name)

    def tokens(self, prompt: int = 0, completion: int = 0) -> None:
        self.prompt += prompt
        self.completion += completion

    def finish_reason(self, reason: str) -> None:
        self.reasons.append(reason)

    def end(self, status: int) -> None:
        span: Any = self.span
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("gen_ai.usage.input_tokens", self.prompt)
        span.set_attribute("gen_ai.usage.output_tokens", self.completion)
        if self.reasons:
            span.set_attribute("gen_ai.response.finish_reasons", self.reasons)
        if status >= 500:
            self.tracing.fail(span, f"HTTP {status}")
        span.end()
