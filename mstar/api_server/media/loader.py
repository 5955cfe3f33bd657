"""A request's image parts to decoded pictures, every bound checked before any pixel is decoded.

For each part, at once: its bytes (a ``data:`` URL decoded in the media pool; a remote one fetched
on the event loop, ``fetch.py``) and its header (``decode.open_image``). Then the request's pixels,
summed in part order, are held to MSTAR_MAX_IMAGE_PIXELS_PER_REQUEST (and to
MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT, which they could otherwise never fit in): the part that takes the
sum past it is a 413 naming it. Then the request takes its pixels from the budget shared by all
requests in flight (waiting for room), decodes its images in the pool, and gives the pixels back
when the caller is done with the pictures (``images`` is a context manager). All of it, waits
included, within what is left of MSTAR_REQUEST_TIMEOUT_S (a 504).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from PIL import Image

from mstar.api_server.http.deadline import seconds_left, timed_out
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.budget import Budget
from mstar.api_server.media.decode import decoded, open_image, pixels
from mstar.api_server.media.fetch import Fetcher
from mstar.api_server.media.parts import ImagePart
from mstar.api_server.media.pool import all_done, in_media_pool
from mstar.api_server.media.sources import allowed_hosts, image_bytes


def pixel_limit(per_request: int, in_flight: int) -> tuple[int, str]:
    """The most pixels one request may have, and the knob that says so."""
    if per_request <= in_flight:
        return per_request, "MSTAR_MAX_IMAGE_PIXELS_PER_REQUEST"
    return in_flight, "MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT"


def check_request_pixels(opened: list[tuple[ImagePart, Image.Image]], limit: int,
                         knob: str) -> int:
    """The request's pixels, summed in part order; the part past ``limit`` is a 413."""
    total = 0
    for part, image in opened:
        total += pixels(image)
        if total > limit:
            raise APIError(413, f"`{part.param}`: the request's images come to {total} pixels "
                           f"with this one; {knob}={limit}", part.param)
    return total


class ImageLoader:
    def __init__(self, settings) -> None:
        self.hosts = allowed_hosts(settings.allowed_media_domains)
        self.max_bytes = settings.max_image_bytes
        self.max_pixels = settings.max_image_pixels
        self.limit, self.limit_knob = pixel_limit(settings.max_image_pixels_per_request,
                                                  settings.max_image_pixels_in_flight)
        self.pixels = Budget(settings.max_image_pixels_in_flight)
        self.fetcher = Fetcher.from_settings(settings)

    @asynccontextmanager
    async def images(self, parts: list[ImagePart], timeout_s: float
                     ) -> AsyncIterator[list[Image.Image]]:
        """The parts' pictures (RGB), held in the in-flight budget until the block ends."""
        try:
            opened, total = await asyncio.wait_for(self._admit(parts),
                                                   max(0.0, seconds_left(timeout_s)))
        except asyncio.TimeoutError as exc:
            raise timed_out(timeout_s, " (fetching the images, or waiting for room to decode "
                            "them: MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT)") from exc
        try:
            yield await _decode_all(opened)
        finally:
            self.pixels.give(total)

    async def _admit(self, parts: list[ImagePart]
                     ) -> tuple[list[tuple[ImagePart, Image.Image]], int]:
        """Every part's header read, the request's pixels checked and taken from the budget."""
        opened = await _each(parts, self._open)
        total = check_request_pixels(opened, self.limit, self.limit_knob)
        await self.pixels.take(total)
        return opened, total

    async def _open(self, part: ImagePart) -> tuple[ImagePart, Image.Image]:
        data = await in_media_pool(image_bytes, part.url, self.hosts, self.max_bytes, part.param)
        if data is None:
            data = await self.fetcher.fetch(part.url, self.max_bytes, part.param)
        return part, await in_media_pool(open_image, data, self.max_pixels, part.param)


async def _each(items: list, work) -> list:
    """``work`` on every item at once; the first failure cancels the others and is raised."""
    if not items:
        return []
    tasks = [asyncio.ensure_future(work(item)) for item in items]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # a failure, or this task cancelled (the request's timeout): stop the rest
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()
    return [task.result() for task in tasks]


async def _decode_all(opened: list[tuple[ImagePart, Image.Image]]) -> list[Image.Image]:
    """Every image decoded in the pool; all have finished (the pixels a thread holds count until
    then) before the first failure is raised."""
    return await all_done(in_media_pool(decoded, image, part.param) for part, image in opened)
