"""Who is calling: the identity a request authenticated as, and what its run reports back for it.

The admission middleware sets the ``Caller`` of each request in a context variable (like the
request's deadline), which every task its handling starts inherits; ``generation.run`` charges the
key's tokens through it and sends its priority and trace context to the worker with each
sub-request. Outside a request (a unit test calling a helper) the caller is ``ANONYMOUS``.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mstar.settings.keys_file import PRIORITIES, ApiKey

if TYPE_CHECKING:
    from mstar.api_server.context.metrics import Metrics
    from mstar.api_server.context.quota import Quotas

SCOPES_ALL = frozenset({"inference", "admin"})
NORMAL = PRIORITIES.index("normal")
ADMIN_KEY_NAME = "mstar_api_key"  # how MSTAR_API_KEY shows in metrics and logs
ANONYMOUS_NAME = "anonymous"  # no authentication configured


@dataclass(frozen=True)
class Identity:
    """A presented key's name, scopes and priority class; ``key`` carries its limits (None:
    unlimited, as MSTAR_API_KEY and an unauthenticated server are)."""

    name: str
    scopes: frozenset[str]
    rank: int = NORMAL
    key: ApiKey | None = None

    @classmethod
    def of(cls, key: ApiKey) -> Identity:
        return cls(key.name, frozenset(key.scopes), key.rank, key)


ADMIN = Identity(ADMIN_KEY_NAME, SCOPES_ALL)
ANONYMOUS_IDENTITY = Identity(ANONYMOUS_NAME, SCOPES_ALL)


@dataclass
class Caller:
    """One admitted request's identity, and where its usage goes (quotas, metrics, its span)."""

    identity: Identity
    quotas: Quotas | None = None
    metrics: Metrics | None = None
    span: Any = None  # ``tracing.RequestSpan`` when MSTAR_OTLP_ENDPOINT is set
    admitted_at: float = field(default_factory=time.perf_counter)
    _first_output: bool = False
    _counters: dict[str, Any] = field(default_factory=dict)  # kind -> its labelled counter

    @property
    def priority(self) -> int:
        return self.identity.rank

    def traceparent(self) -> str:
        """The W3C trace context the worker's spans continue ("" when not tracing)."""
        return "" if self.span is None else self.span.traceparent()

    def model_refusal(self, model: str) -> str | None:
        """Why this key may not use ``model`` (its allow-list), or None."""
        key = self.identity.key
        if self.span is not None:
            self.span.model(model)
        if key is None or key.models is None or model in key.models:
            return None
        return f"key '{key.name}' may not use model '{model}' (allowed: {', '.join(key.models)})"

    def prompt_tokens(self, count: int) -> None:
        self._tokens("prompt", count)
        if self.span is not None:
            self.span.tokens(prompt=count)

    def output_tokens(self, count: int) -> None:
        if not self._first_output and self.metrics is not None:
            self._first_output = True
            self.metrics.key_queue.labels(key=self.identity.name).observe(
                time.perf_counter() - self.admitted_at)
        self._tokens("completion", count)
        if self.span is not None:
            self.span.tokens(completion=count)

    def finished(self, reason: str | None) -> None:
        if self.span is not None and reason is not None:
            self.span.finish_reason(reason)

    def _tokens(self, kind: str, count: int) -> None:
        if self.quotas is not None and self.identity.key is not None:
            self.quotas.charge(self.identity.key, count)
        if self.metrics is not None:
            counter = self._counters.get(kind)
            if counter is None:  # once per request and kind, not per streamed output
                counter = self._counters[kind] = self.metrics.key_tokens.labels(
                    key=self.identity.name, kind=kind)
            counter.inc(count)


ANONYMOUS = Caller(ANONYMOUS_IDENTITY)
_CALLER: ContextVar[Caller] = ContextVar("mstar_caller", default=ANONYMOUS)


def enter_caller(caller: Caller) -> Token:
    """Make ``caller`` the current request's; ``leave_caller`` the token when it is done."""
    return _CALLER.set(caller)


def leave_caller(token: Token) -> None:
    _CALLER.reset(token)


def current_caller() -> Caller:
    return _CALLER.get()
