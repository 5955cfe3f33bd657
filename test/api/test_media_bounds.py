"""Media fetching and decoding are bounded: remote fetches have their own slots, a connect and a
total timeout and a minimum rate; MSTAR_REQUEST_TIMEOUT_S covers them; data: images never wait
behind them; decoded pixels are bounded per request (a 413 naming the part, from the headers,
before any pixel is decoded) and across requests in flight. The remote host is ``image_host``;
test_media_serve_bounds.py checks the same through a running server."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from image_host import PNG, host_fixture  # noqa: F401 - the ``host`` fixture
from serve_helpers import hard_timeout  # noqa: F401 - autouse
from test_media_inputs import bomb_png, data_url, encoded

from mstar.api_server.http.deadline import admitted, reset, seconds_left
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.budget import Budget
from mstar.api_server.media.fetch import Fetcher
from mstar.api_server.media.loader import ImageLoader
from mstar.api_server.media.parts import ImagePart
from mstar.settings import WorkerSettings

MIB = 1 << 20
MP16 = 4096 * 4096


def _part(url: str, j: int = 0) -> ImagePart:
    return ImagePart(f"messages.0.content.{j}.image_url", url)


def _fetcher(**knobs) -> Fetcher:
    return Fetcher.from_settings(WorkerSettings(**knobs))


def _refusal(coro) -> tuple[APIError, float]:
    started = time.monotonic()
    with pytest.raises(APIError) as err:
        asyncio.run(coro)
    return err.value, time.monotonic() - started


# ---- the shared budget ----------------------------------------------------------------------

def test_a_budget_waits_in_order_and_a_cancelled_wait_takes_nothing():
    async def scenario():
        budget = Budget(10)
        await budget.take(6)
        big = asyncio.ensure_future(budget.take(8))
        small = asyncio.ensure_future(budget.take(2))  # would fit, but waits behind ``big``
        await asyncio.sleep(0.01)
        assert not big.done() and not small.done()
        budget.give(6)
        await asyncio.wait_for(asyncio.gather(big, small), 1)
        assert budget.used == 10
        late = asyncio.ensure_future(budget.take(1))
        await asyncio.sleep(0.01)
        late.cancel()
        budget.give(10)
        assert budget.used == 0
        with pytest.raises(ValueError):
            await budget.take(11)

    asyncio.run(scenario())


# ---- remote fetches -------------------------------------------------------------------------

def test_a_dripping_host_is_cut_at_the_minimum_rate(host):
    fetcher = _fetcher(media_fetch_min_bytes_per_s=1000, media_fetch_timeout_s=30)
    err, took = _refusal(fetcher.fetch(host.url("/drip/0.5"), MIB, "p"))
    assert (err.status, err.param) == (400, "p") and "MIN_BYTES_PER_S" in err.message
    assert took < 3


def test_a_fetch_steady_but_too_long_is_cut_at_the_total_timeout(host):
    fetcher = _fetcher(media_fetch_min_bytes_per_s=100, media_fetch_timeout_s=1.0)
    err, took = _refusal(fetcher.fetch(host.url("/rate/1000"), MIB, "p"))  # 4 KiB in 4 s
    assert "MSTAR_MEDIA_FETCH_TIMEOUT_S=1" in err.message and 0.9 < took < 3
    fast = _fetcher(media_fetch_min_bytes_per_s=100, media_fetch_timeout_s=10.0)
    assert len(asyncio.run(fast.fetch(host.url("/rate/4000"), MIB, "p"))) == 4096


def test_a_host_that_does_not_accept_is_cut_at_the_connect_timeout():
    with socket.socket() as full:  # a listen backlog that is full: SYNs go unanswered
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        waiting = [socket.socket() for _ in range(4)]
        for s in waiting:
            s.setblocking(False)
            s.connect_ex(full.getsockname())
        fetcher = _fetcher(media_fetch_connect_timeout_s=0.5, media_fetch_timeout_s=30)
        url = f"http://127.0.0.1:{full.getsockname()[1]}/a.png"
        err, took = _refusal(fetcher.fetch(url, MIB, "p"))
        for s in waiting:
            s.close()
    assert "MSTAR_MEDIA_FETCH_CONNECT_TIMEOUT_S=0.5" in err.message and took < 3


def test_fetches_take_turns_in_their_slots(host):
    fetcher = _fetcher(media_fetch_max_concurrent=2, media_fetch_min_bytes_per_s=1)

    async def four():
        return await asyncio.gather(*(fetcher.fetch(host.url("/rate/8000"), MIB, "p")
                                      for _ in range(4)))

    host.most = 0
    assert [len(b) for b in asyncio.run(four())] == [4096] * 4
    assert host.most == 2


# ---- a request's images ---------------------------------------------------------------------

def _loader(host_allowed: bool = True, **knobs) -> ImageLoader:
    return ImageLoader(WorkerSettings(
        allowed_media_domains="127.0.0.1" if host_allowed else None, **knobs))


async def _load(loader: ImageLoader, parts: list[ImagePart], timeout_s: float = 30, hold=0.0):
    async with loader.images(parts, timeout_s) as images:
        await asyncio.sleep(hold)
        return [image.size for image in images]


def test_the_request_timeout_counts_from_admission():
    assert seconds_left(10.0) == 10.0  # outside a request
    token = admitted()
    try:
        time.sleep(0.2)
        assert 9.5 < seconds_left(10.0) < 9.85
    finally:
        reset(token)


def test_the_request_timeout_covers_the_fetches(host):
    loader = _loader(media_fetch_min_bytes_per_s=1, media_fetch_timeout_s=60)
    err, took = _refusal(_load(loader, [_part(host.url("/drip/0.2"))], timeout_s=1.0))
    assert err.status == 504 and "request_timeout_s=1" in err.message
    assert took < 2.5
    assert loader.fetcher.slots.used == 0


def test_a_data_image_does_not_wait_behind_dripping_fetches(host):
    loader = _loader(media_fetch_min_bytes_per_s=0, media_fetch_timeout_s=60,
                     media_fetch_max_concurrent=4)

    async def scenario():
        drips = [asyncio.ensure_future(_load(loader, [_part(host.url("/drip/1"))], 30))
                 for _ in range(4)]
        await asyncio.sleep(0.3)
        started = time.monotonic()
        sizes = await _load(loader, [_part(data_url(PNG))])
        took = time.monotonic() - started
        assert loader.fetcher.slots.used == 4  # the drips are still running
        for task in drips:
            task.cancel()
        await asyncio.gather(*drips, return_exceptions=True)
        return sizes, took

    sizes, took = asyncio.run(scenario())
    assert sizes == [(8, 6)] and took < 1.0


def test_a_request_over_its_pixels_is_a_413_naming_the_part_before_decoding():
    # Headers of 16 MP over no pixel data: decoding any of them would be a 400 (damaged).
    loader = _loader(max_image_pixels_per_request=2 * MP16)
    parts = [_part(data_url(bomb_png(4096, 4096)), j) for j in range(4)]
    err, _ = _refusal(_load(loader, parts))
    assert (err.status, err.param) == (413, "messages.0.content.2.image_url")
    assert "MSTAR_MAX_IMAGE_PIXELS_PER_REQUEST" in err.message
    assert loader.pixels.used == 0
    never_fits = _loader(max_image_pixels_in_flight=MP16 + 1)
    err, _ = _refusal(_load(never_fits, parts))
    assert err.param == "messages.0.content.1.image_url"
    assert "MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT" in err.message


def test_requests_in_flight_share_the_pixel_budget():
    loader = _loader(max_image_pixels_in_flight=100 * 100 + 10)
    part = _part(data_url(encoded("PNG", (100, 100))))

    async def scenario():
        first = asyncio.ensure_future(_load(loader, [part], hold=0.5))
        await asyncio.sleep(0.1)
        started = time.monotonic()
        second = await _load(loader, [part])  # waits until ``first`` has given its pixels back
        return await first, second, time.monotonic() - started

    first, second, waited = asyncio.run(scenario())
    assert first == second == [(100, 100)] and waited > 0.3
    assert loader.pixels.used == 0
    squeezed = _loader(max_image_pixels_in_flight=100 * 100 + 10)

    async def stuck():
        async with squeezed.images([part], 30):
            return await _load(squeezed, [part], timeout_s=0.3)

    err, _ = _refusal(stuck())
    assert err.status == 504 and "MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT" in err.message
