"""A Qwen3-Omni chat client asking for a spoken reply that goes away mid-speech has its request
aborted in the worker's chain, which frees every KV block of both nodes (thinker and talker)
within a second (issue 35's bound, read from ``/metrics``, whose usage is both caches'), streamed
or not, with the talker colocated and in a process of its own: test_speech_disconnect.py's
check (``abandon_and_require_idle``) on the chained walk.

Served on a tiny random Qwen3-Omni with 65536 positions (``serve_helpers.long_speech_server``,
the CSM test's), each request's thinker asked for 60000 tokens with ``ignore_eos`` and a seconds
bound of 64000 talker frames (MSTAR_MAX_SPEECH_SECONDS 5120): at least 60000 thinker steps each,
with the talker's and code2wav's beside them, which no machine runs within the test's patience,
so an idle server within the bound was an abort.
"""

from __future__ import annotations

import pytest
from omni_helpers import save_tiny_omni
from serve_helpers import Server, abandon_and_require_idle, long_speech_server, raw_post, wait_idle

MAX_TOKENS = 60000  # each request's thinker tokens (ignore_eos: it never stops earlier)
REQUESTS = 2  # at once
ABORT_BOUND_S = 1.0  # issue 35: a disconnect mid-speech frees every block within 1 s
HI = [{"role": "user", "content": "Hello there, how are you?"}]


@pytest.fixture(scope="module", params=["", "talker=process"], ids=["colocated", "talker-apart"])
def server(tiny_tokenizer, tmp_path_factory, request):
    """The talker in the worker's process, or in one of its own (MSTAR_ENCODER_PLACEMENT:
    its blocks then reach /metrics through its process's load)."""
    for srv in long_speech_server(save_tiny_omni, tiny_tokenizer, tmp_path_factory,
                                  {"MSTAR_ENCODER_PLACEMENT": request.param}):
        assert ("talker_node_ready" in srv.log()) == bool(request.param)
        yield srv


def _send(server: Server, stream: bool):
    return raw_post(server, "/v1/chat/completions", {
        "messages": HI, "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 0,
        "modalities": ["text", "audio"], "stream": stream,
        "audio": {"voice": "ethan", "format": "pcm16" if stream else "wav"}})


@pytest.mark.parametrize("stream", [False, True])
def test_a_disconnect_mid_speech_frees_both_nodes_blocks_within_a_second(server, stream):
    wait_idle(server)
    socks = [_send(server, stream) for _ in range(REQUESTS)]
    # the clients leave once a talker speaks too (the chain's running count is both nodes'),
    # and the server is idle within the bound, not ~60000 thinker steps later: both aborted
    abandon_and_require_idle(server, socks, REQUESTS + 1, ABORT_BOUND_S)
