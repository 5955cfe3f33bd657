"""How a streamed body is framed: server-sent events (OpenAI's ``data:`` lines, the typed events of
the Responses and Anthropic APIs) and NDJSON lines (/generate)."""

from __future__ import annotations

from typing import Any

import msgspec

_json = msgspec.json.Encoder()


def sse(payload: Any) -> bytes:
    return b"data: " + _json.encode(payload) + b"\n\n"


def named_sse(event: str, payload: Any) -> bytes:
    """A server-sent event with its type on an ``event:`` line (the Responses and Anthropic APIs)."""
    return b"event: " + event.encode() + b"\ndata: " + _json.encode(payload) + b"\n\n"


def json_line(payload: Any) -> bytes:
    return _json.encode(payload) + b"\n"


SSE_DONE = b"data: [DONE]\n\n"
