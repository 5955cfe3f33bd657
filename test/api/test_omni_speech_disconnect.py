"""A Qwen3-Omni chat client asking for a spoken reply that goes away mid-speech has its request
aborted in the worker's chain, which frees every KV block of both nodes (thinker and talker)
within a second (issue 35's bound, read from ``/metrics``, whose usage is both caches'), streamed
or not, with the talker colocated and in a process of its own: test_speech_disconnect.py's
check (``abandon_and_require_idle``) on the chained walk.

Served on a tiny random Qwen3-Omni with 65536 positions, each request's thinker asked for 60000
tokens with ``ignore_eos`` and a seconds bound of 64000 talker frames (MSTAR_MAX_SPEECH_SECONDS
5120): at least 60000 thinker steps each, with the talker's and code2wav's beside them, which no
machine runs within the test's patience, so an idle server within the bound was an abort.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
from omni_helpers import save_tiny_omni
from serve_helpers import Server, abandon_and_require_idle, wait_idle

POSITIONS = 65536
MAX_TOKENS = 60000  # each request's thinker tokens (ignore_eos: it never stops earlier)
SECONDS = 64000 / 12.5  # MSTAR_MAX_SPEECH_SECONDS: 64000 talker frames
REQUESTS = 2  # at once
ABORT_BOUND_S = 1.0  # issue 35: a disconnect mid-speech frees every block within 1 s
HI = [{"role": "user", "content": "Hello there, how are you?"}]


@pytest.fixture(scope="module", params=["", "talker=process"], ids=["colocated", "talker-apart"])
def server(tiny_tokenizer, tmp_path_factory, request):
    """The talker in the worker's process, or in one of its own (MSTAR_ENCODER_PLACEMENT:
    its blocks then reach /metrics through its process's load)."""
    model = save_tiny_omni(tmp_path_factory.mktemp("omni-long"), tiny_tokenizer,
                           positions=POSITIONS)
    srv = Server(model, tmp_path_factory.mktemp("log") / "serve.log",
                 {"MSTAR_DTYPE": "float32", "MSTAR_MAX_SPEECH_SECONDS": str(SECONDS),
                  "MSTAR_CPU_KV_CACHE_GB": "0.08", "MSTAR_ENCODER_PLACEMENT": request.param})
    try:
        srv.wait_ready()
        assert ("talker_node_ready" in srv.log()) == bool(request.param)
        yield srv
    finally:
        srv.stop()


def _send(server: Server, stream: bool) -> socket.socket:
    """A raw connection, so that the test decides when it closes: not a client's timeout."""
    url = urlsplit(server.url)
    body = json.dumps({"messages": HI, "max_tokens": MAX_TOKENS, "ignore_eos": True,
                       "temperature": 0, "modalities": ["text", "audio"], "stream": stream,
                       "audio": {"voice": "ethan", "format": "pcm16" if stream else "wav"}})
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.hostname}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body.encode())
    return sock


@pytest.mark.parametrize("stream", [False, True])
def test_a_disconnect_mid_speech_frees_both_nodes_blocks_within_a_second(server, stream):
    wait_idle(server)
    socks = [_send(server, stream) for _ in range(REQUESTS)]
    # the clients leave once a talker speaks too (the chain's running count is both nodes'),
    # and the server is idle within the bound, not ~60000 thinker steps later: both aborted
    abandon_and_require_idle(server, socks, REQUESTS + 1, ABORT_BOUND_S)
