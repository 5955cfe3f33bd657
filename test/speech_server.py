"""The served tiny CSM the speech route's tests share (a pytest plugin of test/conftest.py): one
``mstar serve`` per test session (per xdist worker; xdist_groups puts the modules naming
``speech_server`` on one worker), float32, with speech bounds small enough to reach: 2 s of
CSM's 12.5 frames a second is 25 frames (the tiny CSM never ends early: its 256 positions make
~240 frames), and 40 characters of input."""

from __future__ import annotations

import pytest

SECONDS, BOUND_FRAMES, INPUT_CHARS = 2.0, 25, 40
BOUNDS = {"MSTAR_MAX_SPEECH_SECONDS": str(SECONDS),
          "MSTAR_MAX_SPEECH_INPUT_CHARS": str(INPUT_CHARS)}


@pytest.fixture(scope="session")
def speech_csm(tmp_path_factory, tiny_tokenizer):
    from csm_helpers import save_tiny_csm

    return save_tiny_csm(tmp_path_factory.mktemp("csm"), tiny_tokenizer)


@pytest.fixture(scope="session")
def speech_server(speech_csm, tmp_path_factory):
    from serve_helpers import running_server

    yield from running_server(speech_csm, tmp_path_factory.mktemp("csm-serve") / "s.log",
                              {"MSTAR_DTYPE": "float32", **BOUNDS})
