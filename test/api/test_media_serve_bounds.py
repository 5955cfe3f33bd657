"""Media bounds through a running `mstar serve` of a tiny SmolVLM: a data: image is answered within
2 s while four fetches drip (their slots full), a dripping fetch ends at MSTAR_REQUEST_TIMEOUT_S
with a 504, and 4 concurrent requests of 8 images of 16 MP each are 413s naming the part while
the server's memory stays under the pixel bound plus 256 MiB."""

from __future__ import annotations

import io
import threading
import time

import httpx
import pytest
from image_host import PNG, host_fixture  # noqa: F401 - the ``host`` fixture
from PIL import Image
from serve_helpers import hard_timeout, running_server  # noqa: F401 - hard_timeout is autouse
from test_media_inputs import data_url
from test_responses_store_bounds import rss_bytes
from vlm_helpers import make_tiny_vlm

MIB = 1 << 20
PER_REQUEST_MP = 32
REQUEST_TIMEOUT_S = 6  # shorter than MSTAR_MEDIA_FETCH_TIMEOUT_S (8)
IN_FLIGHT_MP = 64


@pytest.fixture(scope="module")
def vlm_server(host, tiny_tokenizer, tmp_path_factory):
    model = make_tiny_vlm("smolvlm", tiny_tokenizer, tmp_path_factory.mktemp("smolvlm"))
    yield from running_server(model, tmp_path_factory.mktemp("vlm") / "s.log", {
        "MSTAR_DTYPE": "float32", "MSTAR_NUM_KV_BLOCKS": "256",
        "MSTAR_ALLOWED_MEDIA_DOMAINS": "127.0.0.1",
        "MSTAR_MEDIA_FETCH_MIN_BYTES_PER_S": "0", "MSTAR_MEDIA_FETCH_TIMEOUT_S": "8",
        "MSTAR_SHUTDOWN_TIMEOUT_S": "1", "MSTAR_MEDIA_FETCH_MAX_CONCURRENT": "4",
        "MSTAR_REQUEST_TIMEOUT_S": str(REQUEST_TIMEOUT_S),
        "MSTAR_MAX_IMAGE_PIXELS_PER_REQUEST": str(PER_REQUEST_MP * MIB),
        "MSTAR_MAX_IMAGE_PIXELS_IN_FLIGHT": str(IN_FLIGHT_MP * MIB)})


def _chat(*urls: str) -> dict:
    content = [{"type": "text", "text": "Describe."}]
    content += [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


def _post_all(url: str, bodies: list[dict], timeout: float = 30) -> tuple[list, list]:
    """Each body posted from a thread of its own: (the responses, filled in; the threads)."""
    out: list = [None] * len(bodies)

    def post(i: int) -> None:
        try:
            out[i] = httpx.post(url, json=bodies[i], timeout=timeout)
        except httpx.HTTPError as exc:
            out[i] = exc

    threads = [threading.Thread(target=post, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    return out, threads


def test_a_data_image_is_answered_while_four_fetches_drip(vlm_server, host):
    url = vlm_server.url + "/v1/chat/completions"
    assert httpx.post(url, json=_chat(data_url(PNG)), timeout=60).status_code == 200  # warm
    _, drips = _post_all(url, [_chat(host.url("/drip/3"))] * 4, timeout=10)
    time.sleep(1.0)  # the four fetches are under way
    started = time.monotonic()
    resp = httpx.post(url, json=_chat(data_url(PNG)), timeout=10)
    assert resp.status_code == 200, resp.text
    assert time.monotonic() - started < 2.0
    assert all(t.is_alive() for t in drips)  # still dripping


def test_the_request_timeout_ends_a_request_whose_fetch_drips(vlm_server, host):
    started = time.monotonic()
    resp = httpx.post(vlm_server.url + "/v1/chat/completions", json=_chat(host.url("/drip/1")),
                      timeout=30)
    took = time.monotonic() - started
    assert resp.status_code == 504 and "request_timeout_s=6" in resp.json()["error"]["message"]
    assert REQUEST_TIMEOUT_S - 0.5 < took < REQUEST_TIMEOUT_S + 2


def test_requests_of_8_images_of_16_mp_are_413s_and_the_server_stays_small(vlm_server):
    out = io.BytesIO()
    Image.new("RGB", (4096, 4096), (30, 90, 200)).save(out, format="PNG")
    body = _chat(*[data_url(out.getvalue())] * 8)
    before = rss_bytes(vlm_server.proc.pid)
    results, threads = _post_all(vlm_server.url + "/v1/chat/completions", [body] * 4)
    peak = before
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_bytes(vlm_server.proc.pid))
        time.sleep(0.01)
    for resp in results:
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["param"] == "messages.0.content.3.image_url"
    grown = peak - before
    print(f"grew {grown / MIB:.0f} MiB at the peak")
    assert grown < IN_FLIGHT_MP * MIB * 4 + 256 * MIB, f"grew {grown / MIB:.0f} MiB"
