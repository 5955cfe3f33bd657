"""Stored responses (``store: true``): for GET and DELETE /v1/responses/{id} and for
``previous_response_id``.

In memory, bounded: at most MSTAR_RESPONSES_STORE_CAPACITY responses, each kept for
MSTAR_RESPONSES_STORE_TTL_S after it was stored (when full, the least recently used goes first). With
MSTAR_RESPONSES_STORE_PER_KEY, a response is visible only to requests presenting the API key that
created it (compared by SHA-256 digest; the key itself is never kept). Lost on restart. Used only
from the event loop's thread.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache

from mstar.api_server.responses.protocol import InputItem

NO_KEY = ""


@dataclass(frozen=True)
class StoredResponse:
    body: dict[str, Any]  # the response object, as it was returned
    conversation: list[InputItem]  # what a follow-up sees first: all input, then the output


def owner_of(key: bytes | None, per_key: bool) -> str:
    """Whose responses a request sees: its API key's digest, or everyone's (NO_KEY)."""
    if not per_key or key is None:
        return NO_KEY
    return hashlib.sha256(key).hexdigest()


class ResponseStore:
    def __init__(self, capacity: int, ttl_s: float,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self._entries: TTLCache | None = (
            TTLCache(maxsize=capacity, ttl=ttl_s, timer=timer) if capacity > 0 else None)

    def put(self, owner: str, response_id: str, entry: StoredResponse) -> None:
        if self._entries is not None:
            self._entries[(owner, response_id)] = entry

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        if self._entries is None:
            return None
        return self._entries.get((owner, response_id))

    def delete(self, owner: str, response_id: str) -> bool:
        if self._entries is None:
            return False
        return self._entries.pop((owner, response_id), None) is not None

    def __len__(self) -> int:
        return 0 if self._entries is None else len(self._entries)
