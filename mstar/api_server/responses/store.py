"""Stored responses (``store: true``): for GET and DELETE /v1/responses/{id} and for
``previous_response_id``.

In memory, bounded three ways: at most MSTAR_RESPONSES_STORE_CAPACITY responses, at most
MSTAR_RESPONSES_STORE_MAX_MB bytes in all, each kept for MSTAR_RESPONSES_STORE_TTL_S after it was
stored. Past a bound the oldest go first. A response is kept as JSON bytes (``StoredResponse``), so
its size is what it holds; one larger than an eighth of the byte bound is not stored at all.
With MSTAR_RESPONSES_STORE_PER_KEY, a response is visible only to requests presenting the API key
that created it (compared by SHA-256 digest; the key itself is never kept). Lost on restart. Used
only from the event loop's thread.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import structlog

from mstar.api_server.responses.kept import StoredResponse

log = structlog.get_logger(__name__)

NO_KEY = ""
# The largest response stored is this fraction of the byte bound, so that a full store always
# holds at least this many responses and one huge response cannot flush every other.
SMALLEST_FULL_STORE = 8

__all__ = ["NO_KEY", "ResponseStore", "StoredResponse", "owner_of"]


def owner_of(key: bytes | None, per_key: bool) -> str:
    """Whose responses a request sees: its API key's digest, or everyone's (NO_KEY)."""
    if not per_key or key is None:
        return NO_KEY
    return hashlib.sha256(key).hexdigest()


class ResponseStore:
    def __init__(self, capacity: int, ttl_s: float, max_bytes: int = 1 << 62,
                 timer: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_item_bytes = max_bytes // SMALLEST_FULL_STORE
        self.ttl_s = ttl_s
        self.bytes = 0  # the stored responses' sizes, summed
        self._timer = timer
        # (owner, id) -> (expiry, response), oldest first: expiry follows insertion order.
        self._entries: OrderedDict[tuple[str, str], tuple[float, StoredResponse]] = OrderedDict()

    def put(self, owner: str, response_id: str, entry: StoredResponse) -> None:
        if not self.capacity or not self.max_bytes:
            return
        if entry.size > self.max_item_bytes:
            log.warning("response_not_stored", response_id=response_id, bytes=entry.size,
                        max_bytes=self.max_item_bytes)
            return
        self.delete(owner, response_id)
        self._entries[(owner, response_id)] = (self._timer() + self.ttl_s, entry)
        self.bytes += entry.size
        self._evict()

    def get(self, owner: str, response_id: str) -> StoredResponse | None:
        self._expire()
        found = self._entries.get((owner, response_id))
        return None if found is None else found[1]

    def delete(self, owner: str, response_id: str) -> bool:
        found = self._entries.pop((owner, response_id), None)
        if found is not None:
            self.bytes -= found[1].size
        return found is not None

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _evict(self) -> None:
        """Past the count or the byte bound (or the TTL), the oldest go."""
        self._expire()
        while len(self._entries) > self.capacity or self.bytes > self.max_bytes:
            self._drop_oldest()

    def _expire(self) -> None:
        now = self._timer()
        while self._entries and next(iter(self._entries.values()))[0] <= now:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        _, (_, entry) = self._entries.popitem(last=False)
        self.bytes -= entry.size


def store_from(settings: Any) -> ResponseStore:
    """The store the knobs (MSTAR_RESPONSES_STORE_*) describe."""
    return ResponseStore(settings.responses_store_capacity, settings.responses_store_ttl_s,
                         int(settings.responses_store_max_mb * (1 << 20)))
