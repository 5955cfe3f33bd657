"""`mstar serve` on a tiny CSM with its codec node in a process of its own
(MSTAR_ENCODER_PLACEMENT=codec=process): ``/v1/audio/speech`` speaks as ``LLM.speak`` does
(colocated), and a client that goes away mid-speech leaves the node's process holding no request
state (``mstar_codec_requests``, which the node's replies keep) and every KV block free within a
second. The model has 65536 positions so that the aborted request (64000 frames) cannot end by
itself first (test/api/test_speech_disconnect.py says why)."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from csm_helpers import save_tiny_csm
from serve_helpers import Server, abandon_and_require_idle, wait_idle

POSITIONS = 65536
LONG = 64000  # the aborted request's max_frames
ONE = {"input": "Hello there.", "voice": "0", "max_frames": 14, "response_format": "pcm"}
ABORT_BOUND_S = 1.0  # issue 35: a disconnect mid-speech frees every block within 1 s
STEP = 1 / 32767  # one 16-bit step of full scale


@pytest.fixture(scope="module")
def model(tiny_tokenizer, tmp_path_factory):
    return save_tiny_csm(tmp_path_factory.mktemp("csm-long"), tiny_tokenizer,
                         positions=POSITIONS)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    srv = Server(model, tmp_path_factory.mktemp("log") / "serve.log",
                 {"MSTAR_DTYPE": "float32", "MSTAR_MAX_SPEECH_SECONDS": str(LONG / 12.5),
                  "MSTAR_CPU_KV_CACHE_GB": "0.08", "MSTAR_ENCODER_PLACEMENT": "codec=process"})
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


def test_speech_with_the_codec_apart_is_llm_speak(server, model):
    from mstar import LLM

    resp = httpx.post(server.url + "/v1/audio/speech", json=ONE, timeout=120)
    assert resp.status_code == 200, resp.text
    assert "codec_node_ready" in server.log() and "node=codec" in server.log()
    llm = LLM(model=str(model), device="cpu", dtype="float32", kv_block_size=4,
              num_kv_blocks=64)
    (speech,) = llm.speak(ONE["input"], speaker=0, max_frames=ONE["max_frames"])
    expected = np.clip(speech.audio, -1.0, 1.0)
    pcm = np.frombuffer(resp.content, "<i2")
    assert len(pcm) == len(expected) > 0
    assert np.abs(pcm / 32767 - expected).max() <= STEP


def test_a_disconnect_frees_the_codec_nodes_state(server):
    wait_idle(server)
    url = urlsplit(server.url)
    body = json.dumps({**ONE, "max_frames": LONG, "stream_format": "audio"})
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {url.hostname}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body.encode())
    deadline = time.monotonic() + 60
    while server.metric("mstar_codec_requests") < 1:  # its frames reached the node
        assert time.monotonic() < deadline, "the node never held the request"
        time.sleep(0.02)
    abandon_and_require_idle(server, [sock], 1, ABORT_BOUND_S)
    assert server.metric("mstar_codec_requests") == 0
