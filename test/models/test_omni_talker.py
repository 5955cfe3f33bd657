"""Qwen3-Omni's talker offline, on a tiny random Qwen3-Omni (float32, greedy): mstar's frame loop
(``TalkerFrames``: the talker's steps, code 0 from its ``codec_head`` with the codec's special ids
barred, the code predictor as the per-frame head, each frame's embedding plus the step's text row
as the next input) makes the frames transformers' talker ``generate`` makes from the same inputs
(the talker's ``inputs_embeds`` path: prefill embeddings, per-step text rows, the pad row)."""

from __future__ import annotations

import pytest
import torch
from omni_helpers import CODE_GROUPS, save_tiny_omni, talker_inputs, talker_reference

from mstar.models.speech.omni_talker import TalkerFrames, load_talker

MAX_FRAMES = 30
LONG, ENDS = 1, 0  # input seeds: one runs MAX_FRAMES, one meets the end code after 11 frames


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory, tiny_tokenizer):
    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer)


@pytest.fixture(scope="module")
def reference(tiny_omni):
    """transformers' talker, read through transformers' whole model."""
    from transformers import Qwen3OmniMoeForConditionalGeneration

    model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(tiny_omni, dtype=torch.float32)
    return model.talker.eval()


@pytest.fixture(scope="module")
def ours(tiny_omni):
    return TalkerFrames(load_talker(tiny_omni))


def _frames(loop: TalkerFrames, seed: int) -> torch.Tensor:
    made = list(loop.frames(*talker_inputs(loop.talker.config, seed), MAX_FRAMES))
    return torch.stack(made) if made else torch.zeros(0, CODE_GROUPS, dtype=torch.int64)


def _reference(talker, seed: int) -> torch.Tensor:
    return talker_reference(talker, *talker_inputs(talker.config, seed), MAX_FRAMES)


def test_the_talker_is_read_from_its_own_tensors(ours, reference):
    """The per-expert checkpoint tensors stacked as transformers' loader stacks them."""
    mine, theirs = ours.talker.state_dict(), reference.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in theirs)


def test_frames_are_transformers_talker_generate(ours, reference):
    frames = _frames(ours, LONG)
    assert frames.shape == (MAX_FRAMES, CODE_GROUPS)
    assert torch.equal(frames, _reference(reference, LONG))
    assert len({tuple(f) for f in frames.tolist()}) >= 10  # not one frame repeated
    assert int(frames[:, 1:].max()) > 0  # the code predictor's codes are not all 0


def test_the_end_code_stops_both_the_same_way(ours, reference):
    frames = _frames(ours, ENDS)
    assert 0 < len(frames) < MAX_FRAMES  # the end code came first
    assert torch.equal(frames, _reference(reference, ENDS))
