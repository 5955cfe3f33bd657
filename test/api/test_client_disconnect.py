"""A client that goes away mid-request (streamed or not) has its sub-requests aborted in the
worker, which frees their KV blocks at once, instead of running them to the end.

Served, on a random Llama with a long context (``long_model_dir``), so that the request the client abandons
(4 x 16000 tokens: at least 16000 engine steps) could not end by itself within the test's
patience on any machine. The shared tiny model's 512 positions allow at most ~500 steps, which a
fast machine runs before its worker's next statistics report.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
from serve_helpers import Server, abandon_and_require_idle, hard_timeout, wait_idle  # noqa: F401

MAX_TOKENS = 16000  # the long model (conftest.long_model_dir) has 16384 positions
ABORT_PATIENCE_S = 5.0  # from the disconnect to an idle worker (an abort takes ~0.2 s)


@pytest.fixture(scope="module")
def server(long_model_dir, tmp_path_factory):
    srv = Server(long_model_dir, tmp_path_factory.mktemp("log") / "serve.log",
                 {"MSTAR_CPU_KV_CACHE_GB": "0.04"})
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


def _send(server: Server, stream: bool) -> socket.socket:
    """A raw connection, so that the test decides when it closes: not a client's timeout."""
    url = urlsplit(server.url)
    body = json.dumps({"prompt": "x", "max_tokens": MAX_TOKENS, "n": 4, "ignore_eos": True,
                       "stream": stream}).encode()
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)
    return sock


@pytest.mark.parametrize("stream", [True, False])
def test_client_disconnect_aborts_and_frees_kv_blocks(server, stream):
    wait_idle(server)
    # idle within the patience, not ~16000 steps later: aborted
    abandon_and_require_idle(server, [_send(server, stream)], 1, ABORT_PATIENCE_S)
