"""The answers of a key's refusals, in the shape of the API the path belongs to: 403 (the key lacks
the scope) and 429 (over one of its limits) with ``Retry-After`` (whole seconds, as HTTP says),
``retry-after-ms`` (exact; OpenAI's clients read it first) and OpenAI's ``x-ratelimit-*``
headers, so client libraries back off the right time and then succeed."""

from __future__ import annotations

import json
import math
from typing import Any

from mstar.api_server.context.quota import Refusal
from mstar.api_server.http.errors import anthropic_error_body, error_body, is_anthropic_path

RATE_LIMIT_CODE = "rate_limit_exceeded"  # OpenAI's error.code on a 429
ANTHROPIC_KINDS = {403: "permission_error", 429: "rate_limit_error"}


def retry_headers(refusal: Refusal) -> list[tuple[bytes, bytes]]:
    seconds = refusal.retry_after_s
    return [(b"retry-after", str(max(1, math.ceil(seconds))).encode()),
            (b"retry-after-ms", str(max(1, math.ceil(seconds * 1000))).encode())]


async def send_refusal(send: Any, status: int, message: str, path: str, kind: str,
                       headers: list[tuple[bytes, bytes]] = (), code: str | None = None) -> None:
    """``kind``: OpenAI's error.type (a 429's: the limit, "requests" or "tokens")."""
    if is_anthropic_path(path):
        body = anthropic_error_body(status, message)
        body["error"]["type"] = ANTHROPIC_KINDS[status]
    else:
        body = error_body(status, message, code=code, kind=kind)
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})
