"""Who may call the server and how much (the keys file), the scheduler's priority classes, and
OpenTelemetry tracing. The keys file's own schema is ``mstar.settings.keys_file``."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from mstar.settings.knobs.field import _admission


class AdmissionKnobs(BaseModel):
    api_keys_file: Path | None = _admission(
        None, "A TOML file of API keys ([[keys]] tables: name, hash = 'sha256:<hex>', scopes, "
        "requests_per_minute, tokens_per_minute, max_concurrent, priority, models; "
        "docs/operations.rst). Set, every request except /health needs one of its keys (or "
        "MSTAR_API_KEY, which stays a single admin key); over a key's limit a request gets 429 "
        "with Retry-After. Re-read on SIGHUP; the settings fingerprint covers its content. A "
        "security setting: an unreadable or invalid file stops start-up (exit 2, naming the file "
        "and line), and a bad reload keeps the old keys.", security=True)
    priority_preemption: bool = _admission(
        True, "A waiting request of a higher priority class (its key's priority) may preempt a "
        "running request of a lower class when the batch is full: the newest of that class goes "
        "back to the queue (recomputed later); the oldest running request of every class is "
        "never preempted for priority. Off: higher classes are only admitted first. Not "
        "reloadable.")
    otlp_endpoint: str | None = _admission(
        None, "OpenTelemetry: send trace spans (OTLP over HTTP/protobuf) to this base URL, e.g. "
        "'http://127.0.0.1:4318' (spans go to <url>/v1/traces): the request in the API server; "
        "its queueing, prefill and decode in the worker, linked by a trace context carried in "
        "the request's message. An incoming 'traceparent' header is honoured. Unset: no "
        "tracing, and OpenTelemetry is never imported. Not reloadable.")
