"""The bounded pool in which images are decoded and preprocessed (and ``data:`` URLs' base64
decoded), off the event loop: a burst of image requests queues here instead of taking every thread
of the default executor. Remote fetches do not run here (``fetch.py`` runs them on the event
loop), so however slow a host, they never hold these threads."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

MEDIA_THREADS = 4

_POOL = ThreadPoolExecutor(MEDIA_THREADS, thread_name_prefix="mstar-media")


async def in_media_pool(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(_POOL, fn, *args)


async def all_done(calls) -> list:
    """Every call's result, in order, once all have finished (a thread in the pool cannot be
    stopped, and what it holds counts until then); then the first failure is raised."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results
