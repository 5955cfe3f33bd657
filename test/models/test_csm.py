"""CSM on a tiny random model, float32, greedy: mstar's frame loop (backbone, then the depth
decoder as the backbone's per-frame head) makes the codes transformers'
``CsmForConditionalGeneration.generate`` makes, and the codec node's windowed Mimi decode (the
walk graph's chunk policy: N frames after L frames of left context) stays within
``WAVE_TOLERANCE`` of transformers' one whole decode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from csm_helpers import CODEBOOKS, PROMPT, WAVE_TOLERANCE, save_tiny_csm
from csm_helpers import reference as _reference

from mstar.graph.chunks import frame_windows
from mstar.graph.speech import CSM_CHUNK_FRAMES
from mstar.models.speech.codec_node import CodecStream
from mstar.models.speech.speaker import Speaker


@pytest.fixture(scope="module")
def tiny_csm(tmp_path_factory, tiny_tokenizer):
    return save_tiny_csm(tmp_path_factory.mktemp("csm"), tiny_tokenizer)


def test_codes_are_transformers_and_the_wave_within_tolerance(tiny_csm):
    speaker = Speaker(tiny_csm)
    frames = 3 * CSM_CHUNK_FRAMES + 2  # whole chunks and a shorter last one
    ours = speaker.speak({"prompt_token_ids": PROMPT}, max_frames=frames)
    codes = _reference(speaker.model, PROMPT, frames)
    assert torch.equal(ours.codes, codes[0])
    (wave,) = _reference(speaker.model, PROMPT, frames, audio=True)
    wave = wave.numpy()
    assert ours.audio.shape == wave.shape == (len(ours.codes) * speaker.samples_per_frame,)
    assert np.abs(ours.audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_text_goes_through_the_models_tokenizer(tiny_csm):
    speaker = Speaker(tiny_csm)
    ids = speaker.prompt_ids("hello world", speaker=1)
    assert ids == speaker.tokenizer.encode("[1]hello world")
    assert torch.equal(speaker.speak("hello world", 1, max_frames=3).codes,
                       _reference(speaker.model, ids, 3)[0])


def test_audio_streams_in_chunks_before_the_last_frame(tiny_csm):
    speaker = Speaker(tiny_csm)
    spf = speaker.samples_per_frame
    sizes = [(i, len(c)) for i, (_, chunks) in
             enumerate(speaker.stream({"prompt_token_ids": PROMPT}, max_frames=10))
             for c in chunks]
    n = CSM_CHUNK_FRAMES
    assert sizes == [(n - 1, n * spf), (2 * n - 1, n * spf), (9, 2 * spf)]


def test_an_end_frame_stops_the_loop_and_is_not_sounded(tiny_csm):
    from transformers import CsmForConditionalGeneration

    model = CsmForConditionalGeneration.from_pretrained(tiny_csm).eval()
    with torch.no_grad():  # every head's logits tie: argmax picks code 0, the end code
        model.lm_head.weight.zero_()
        model.depth_decoder.codebooks_head.weight.zero_()
    ours = Speaker(model).speak({"prompt_token_ids": PROMPT}, max_frames=6)
    assert torch.equal(ours.codes, _reference(model, PROMPT, 6)[0])
    assert ours.codes.tolist() == [[0] * CODEBOOKS] and ours.audio.size == 0


def test_the_codec_node_holds_a_bounded_window_and_decodes_every_frame_once():
    """With a decode that sounds each frame by itself, the chunks join into the whole decode
    exactly, and the node never holds more than the policy's window."""
    policy = frame_windows(3, 2)
    decoded = []

    def decode(codes):
        decoded.append(len(codes))
        return np.repeat(codes[:, 0].numpy().astype(np.float32), 2)

    stream = CodecStream(decode, policy, samples_per_frame=2)
    chunks = []
    for f in range(11):
        chunks += stream.push(torch.tensor([f, 0]))
        assert len(stream.held) <= policy.held_frames
    chunks += stream.finish()
    assert np.array_equal(np.concatenate(chunks), np.repeat(np.arange(11.0), 2))
    assert decoded == [3, 5, 5, 4]  # each window: its left context, then its new frames


def test_left_context_is_what_keeps_the_windows_close_to_the_whole_decode(tiny_csm):
    """The same windows with no left context miss the tolerance: the test above can fail."""
    speaker = Speaker(tiny_csm)
    (wave,) = _reference(speaker.model, PROMPT, 12, audio=True)
    speaker.chunk = frame_windows(CSM_CHUNK_FRAMES, 0)
    bare = speaker.speak({"prompt_token_ids": PROMPT}, max_frames=12).audio
    assert np.abs(bare - wave.numpy()).max() > WAVE_TOLERANCE * np.abs(wave.numpy()).max()


def test_a_speaker_takes_csm_only_and_a_positive_frame_bound(tiny_csm):
    with pytest.raises(ValueError, match="Speaker runs CSM .CsmForConditionalGeneration., not Linear"):
        Speaker(torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="max_frames must be at least 1, not 0"):
        next(Speaker(tiny_csm).stream({"prompt_token_ids": [1]}, max_frames=0))
