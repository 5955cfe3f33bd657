"""Fetching a remote image (an allowed host's http(s) URL), bounded so that slow hosts cannot hold
the server: on the event loop (no thread is held while bytes trickle in), at most
MSTAR_MEDIA_FETCH_MAX_CONCURRENT at once across all requests (the others wait for a slot; data:
images never do), connecting within MSTAR_MEDIA_FETCH_CONNECT_TIMEOUT_S, done within
MSTAR_MEDIA_FETCH_TIMEOUT_S, and its body, after its first RATE_GRACE_S, averaging at least
MSTAR_MEDIA_FETCH_MIN_BYTES_PER_S (unless 0). The caller bounds the whole (MSTAR_REQUEST_TIMEOUT_S) by
cancelling. Each limit hit is a 400 naming the part and the knob. Redirects are not followed: a
listed host could otherwise send the fetch anywhere.
"""

from __future__ import annotations

import asyncio

import httpx

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.budget import Budget
from mstar.api_server.media.sources import too_large

RATE_GRACE_S = 1.0  # a body's first second is not held to the minimum rate


class Fetcher:
    def __init__(self, max_concurrent: int, connect_timeout_s: float, timeout_s: float,
                 min_bytes_per_s: int) -> None:
        self.slots = Budget(max_concurrent)
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        self.min_bytes_per_s = min_bytes_per_s

    @classmethod
    def from_settings(cls, settings) -> Fetcher:
        return cls(settings.media_fetch_max_concurrent, settings.media_fetch_connect_timeout_s,
                   settings.media_fetch_timeout_s, settings.media_fetch_min_bytes_per_s)

    async def fetch(self, url: str, max_bytes: int, param: str) -> bytes:
        await self.slots.take(1)
        try:
            return await self._fetch(url, max_bytes, param)
        finally:
            self.slots.give(1)

    def _due(self, start: float, body_start: float, received: int) -> float:
        """When the next byte of the body must have arrived (loop time)."""
        if not self.min_bytes_per_s:
            return start + self.timeout_s
        by_rate = body_start + RATE_GRACE_S + (received + 1) / self.min_bytes_per_s
        return min(start + self.timeout_s, by_rate)

    async def _fetch(self, url: str, max_bytes: int, param: str) -> bytes:
        loop = asyncio.get_running_loop()
        start = loop.time()
        timeout = httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                return await asyncio.wait_for(self._get(client, url, max_bytes, param, start),
                                              self.timeout_s)
        except asyncio.TimeoutError as exc:
            raise self._too_slow(loop.time() - start, param) from exc
        except httpx.ConnectTimeout as exc:
            raise APIError(400, f"`{param}`: cannot connect to the image's host within "
                           f"MSTAR_MEDIA_FETCH_CONNECT_TIMEOUT_S={self.connect_timeout_s:g}",
                           param) from exc
        except httpx.TimeoutException as exc:  # httpx's own read timeout: the total one
            raise self._too_slow(self.timeout_s, param) from exc
        except httpx.HTTPError as exc:
            raise APIError(400, f"`{param}`: cannot fetch the image: {type(exc).__name__}",
                           param) from exc

    async def _get(self, client: httpx.AsyncClient, url: str, max_bytes: int, param: str,
                   start: float) -> bytes:
        loop = asyncio.get_running_loop()
        async with client.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise APIError(400, f"`{param}`: fetching the image gave HTTP "
                               f"{resp.status_code}", param)
            body_start = loop.time()  # the rate is the body's, from here
            chunks = resp.aiter_bytes()
            data = bytearray()
            while True:
                due = self._due(start, body_start, len(data)) - loop.time()
                try:
                    data += await asyncio.wait_for(chunks.__anext__(), max(0.0, due))
                except StopAsyncIteration:
                    return bytes(data)
                if len(data) > max_bytes:
                    raise too_large(param, max_bytes)

    def _too_slow(self, elapsed: float, param: str) -> APIError:
        if elapsed >= self.timeout_s:
            why = f"took longer than MSTAR_MEDIA_FETCH_TIMEOUT_S={self.timeout_s:g}"
        else:
            why = (f"arrived slower than MSTAR_MEDIA_FETCH_MIN_BYTES_PER_S="
                   f"{self.min_bytes_per_s}")
        return APIError(400, f"`{param}`: fetching the image {why}", param)
