"""A speech client that goes away mid-speech has its request aborted in the worker, which frees
every KV block within a second (issue 35's bound, read from ``/metrics``), streamed or not.

Served on a tiny random CSM with 65536 positions and a seconds bound of 64000 frames
(MSTAR_MAX_SPEECH_SECONDS 5120: ``serve_helpers.long_speech_server``), four requests at once:
together at least 64000 engine steps, each with the depth decoder's steps and a Mimi decode
every 4 frames (this 2-core machine makes ~200 frames a second; a machine 10 times faster would
still take half a minute), which no machine runs within the test's patience. The shared tiny
CSM's 256 positions end in about a second, too soon to tell an abort from a finish (the lead's
CI saw a ~500-step request end before the workers' statistics showed it running).
"""

from __future__ import annotations

import pytest
from csm_helpers import save_tiny_csm
from serve_helpers import (
    LONG_SPEECH_SECONDS,
    Server,
    abandon_and_require_idle,
    long_speech_server,
    raw_post,
    wait_idle,
)

FRAMES = int(LONG_SPEECH_SECONDS * 12.5)  # each request's max_frames: it ends only at an end frame
# (the tiny CSM makes none); MSTAR_MAX_SPEECH_SECONDS allows them
VOICES = ("0", "1", "2", "3")  # four requests at once, each its own speaker
ABORT_BOUND_S = 1.0  # issue 35: a disconnect mid-speech frees every block within 1 s


@pytest.fixture(scope="module")
def server(tiny_tokenizer, tmp_path_factory):
    yield from long_speech_server(save_tiny_csm, tiny_tokenizer, tmp_path_factory)


def _send(server: Server, voice: str, stream_format: str | None):
    fields = {"input": "Hello there, how are you?", "voice": voice, "max_frames": FRAMES,
              "response_format": "pcm" if stream_format else "wav"}
    return raw_post(server, "/v1/audio/speech",
                    fields | ({"stream_format": stream_format} if stream_format else {}))


@pytest.mark.parametrize("stream_format", [None, "audio", "sse"])
def test_a_disconnect_mid_speech_frees_every_block_within_a_second(server, stream_format):
    wait_idle(server)
    socks = [_send(server, voice, stream_format) for voice in VOICES]
    # idle within the bound, not ~64000 frames later: aborted
    abandon_and_require_idle(server, socks, len(VOICES), ABORT_BOUND_S)
