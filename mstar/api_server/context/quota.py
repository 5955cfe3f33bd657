"""Per-key quotas: a requests bucket, a tokens bucket and a concurrency count for each key name.

A bucket holds up to a minute's worth (``per_minute``) and refills continuously at that rate. A
request takes one from the requests bucket at admission; tokens are charged as they are known
(the prompt once tokenized, each completion token as it streams), so the tokens bucket may go
below zero: the next request of that key then waits until it is positive again. The limits are
read from the key's entry on every call, so a reload that changes them applies to the next request;
what a bucket holds is kept across a reload (clamped to a lowered limit). Time is ``time.monotonic``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from mstar.settings.keys_file import ApiKey

SECONDS_PER_MINUTE = 60.0
CONCURRENCY_RETRY_S = 1.0  # when a key is at max_concurrent: no bucket says when one ends


@dataclass
class Bucket:
    level: float | None = None  # None: full (never used)
    updated: float = 0.0

    def refill(self, per_minute: int, now: float) -> float:
        """The level now, refilled since the last call and clamped to the limit."""
        if self.level is None:
            self.level = float(per_minute)
        self.level = min(float(per_minute),
                         self.level + (now - self.updated) * per_minute / SECONDS_PER_MINUTE)
        self.updated = now
        return self.level

    def wait_s(self, per_minute: int, need: float) -> float:
        """Seconds until the (refilled) level reaches ``need``."""
        short = need - (self.level or 0.0)
        return max(0.0, short * SECONDS_PER_MINUTE / per_minute)

    def reset_s(self, per_minute: int) -> float:
        """Seconds until the bucket is full again (OpenAI's x-ratelimit-reset-*)."""
        return self.wait_s(per_minute, float(per_minute))


@dataclass(frozen=True)
class Refusal:
    """Why a key's request is refused now (429), and when to retry."""

    limit: str  # "requests", "tokens" or "concurrency"
    message: str
    retry_after_s: float


@dataclass
class KeyUsage:
    """One key name's buckets and its requests in flight."""

    requests: Bucket = field(default_factory=Bucket)
    tokens: Bucket = field(default_factory=Bucket)
    in_flight: int = 0

    def refusal(self, key: ApiKey, now: float) -> Refusal | None:
        """None when the key may start a request now (the requests bucket is then charged)."""
        if key.max_concurrent is not None and self.in_flight >= key.max_concurrent:
            return Refusal("concurrency", f"key '{key.name}' has max_concurrent="
                           f"{key.max_concurrent} requests in flight", CONCURRENCY_RETRY_S)
        rpm, tpm = key.requests_per_minute, key.tokens_per_minute
        if rpm is not None and self.requests.refill(rpm, now) < 1.0:
            wait = self.requests.wait_s(rpm, 1.0)
            return Refusal("requests", f"rate limit reached for key '{key.name}' on requests per "
                           f"minute: limit {rpm}; try again in {wait:.2f}s", wait)
        if tpm is not None and self.tokens.refill(tpm, now) < 1.0:
            wait = self.tokens.wait_s(tpm, 1.0)
            return Refusal("tokens", f"rate limit reached for key '{key.name}' on tokens per "
                           f"minute: limit {tpm}; try again in {wait:.2f}s", wait)
        if rpm is not None:
            self.requests.level -= 1.0
        return None

    def charge(self, key: ApiKey, tokens: int, now: float) -> None:
        if key.tokens_per_minute is not None:
            self.tokens.refill(key.tokens_per_minute, now)
            self.tokens.level -= tokens

    def headers(self, key: ApiKey) -> list[tuple[bytes, bytes]]:
        """OpenAI's x-ratelimit-* headers for the limits this key has."""
        out = []
        for kind, bucket, limit in (("requests", self.requests, key.requests_per_minute),
                                    ("tokens", self.tokens, key.tokens_per_minute)):
            if limit is None:
                continue
            remaining = max(0, math.floor(limit if bucket.level is None else bucket.level))
            out += [(f"x-ratelimit-limit-{kind}".encode(), str(limit).encode()),
                    (f"x-ratelimit-remaining-{kind}".encode(), str(remaining).encode()),
                    (f"x-ratelimit-reset-{kind}".encode(),
                     duration_text(bucket.reset_s(limit)).encode())]
        return out


def duration_text(seconds: float) -> str:
    """A duration as OpenAI writes it in x-ratelimit-reset-*: '6m0s', '1.5s', '120ms'."""
    if seconds < 1.0:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


class Quotas:
    """Every key name's usage (the one owner); the middleware admits and releases through it."""

    def __init__(self, clock=time.monotonic) -> None:
        self._usage: dict[str, KeyUsage] = {}
        self._clock = clock

    def usage(self, key: ApiKey) -> KeyUsage:
        return self._usage.setdefault(key.name, KeyUsage())

    def admit(self, key: ApiKey) -> Refusal | None:
        """Take a request slot for ``key``; None when admitted (``release`` it when done)."""
        usage = self.usage(key)
        refusal = usage.refusal(key, self._clock())
        if refusal is None:
            usage.in_flight += 1
        return refusal

    def release(self, key: ApiKey) -> None:
        self.usage(key).in_flight -= 1

    def charge(self, key: ApiKey, tokens: int) -> None:
        self.usage(key).charge(key, tokens, self._clock())
