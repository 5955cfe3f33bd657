"""Fetching, decoding and preprocessing images off the event loop, in a bounded pool: a burst of
image requests queues here instead of taking every thread of the default executor."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from mstar.api_server.media.decode import decode_image
from mstar.api_server.media.parts import ImagePart
from mstar.api_server.media.sources import allowed_hosts, image_bytes

MEDIA_THREADS = 4

_POOL = ThreadPoolExecutor(MEDIA_THREADS, thread_name_prefix="mstar-media")


async def in_media_pool(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)


def load_image(part: ImagePart, settings):
    """One part's URL to a decoded RGB picture, every limit checked on the way."""
    data = image_bytes(part.url, allowed_hosts(settings.allowed_media_domains),
                       settings.max_image_bytes, part.param)
    return decode_image(data, settings.max_image_pixels, part.param)


async def load_images(parts: list[ImagePart], settings) -> list:
    return list(await asyncio.gather(*(in_media_pool(load_image, p, settings) for p in parts)))
