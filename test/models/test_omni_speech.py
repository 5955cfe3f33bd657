"""Qwen3-Omni offline, end to end on a tiny random Qwen3-Omni (float32, greedy): the thinker
(transformers' module: mstar's thinker is not built yet) answers a chat prompt; its embeddings
become the talker's inputs (``omni_talker_inputs``), mstar's talker loop makes the frames
(``TalkerFrames``, the code predictor as its frame head) and the codec node sounds them in the
graph's windows (``Code2Wav``), all in ``OmniSpeaker``. The text and the waveform are
transformers' ``Qwen3OmniMoeForConditionalGeneration.generate``'s for the same prompt and
speaker."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from omni_helpers import CODE_GROUPS, SAMPLES_PER_FRAME, save_tiny_omni

from mstar.models.speech.omni_code2wav import Code2Wav
from mstar.models.speech.omni_speaker import OmniSpeaker
from mstar.models.speech.omni_talker import TalkerFrames, barred_codes, load_talker

REPLY, FRAMES = 10, 20  # the thinker's most tokens, the talker's most frames
WAVE_TOLERANCE = 1e-6  # of the peak: the same frames through the same windows (measured: 0)
SPEAKER = "ethan"


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory, tiny_tokenizer):
    return save_tiny_omni(tmp_path_factory.mktemp("omni"), tiny_tokenizer)


@pytest.fixture(scope="module")
def model(tiny_omni):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        tiny_omni, dtype=torch.float32).eval()


def _chat(config, words: list[int]) -> list[int]:
    """``<|im_start|>system ... <|im_start|>user words <|im_end|> <|im_start|>assistant\\n``
    (a system turn, which the talker does not read, and ``7`` as the newline)."""
    start, end = config.im_start_token_id, config.im_end_token_id
    return [start, config.system_token_id, 9, 8, end, start, config.user_token_id, *words, end,
            start, config.assistant_token_id, 7]


def _reference(model, ids):
    config = model.config
    return model.generate(
        input_ids=torch.tensor([ids]), speaker=SPEAKER, return_audio=True,
        thinker_max_new_tokens=REPLY, thinker_eos_token_id=config.im_end_token_id,
        thinker_do_sample=False, talker_do_sample=False, talker_repetition_penalty=1.0,
        talker_suppress_tokens=barred_codes(config.talker_config),
        talker_max_new_tokens=FRAMES + 1)


@pytest.mark.parametrize("words", [[11, 12, 13, 14], [40, 41, 42, 43, 44, 45, 46, 47, 48]])
def test_speech_is_transformers_generate(model, words):
    ids = _chat(model.config, words)
    said, speech = OmniSpeaker(model).speak(ids, REPLY, FRAMES, SPEAKER)
    sequences, wave = _reference(model, ids)
    assert said == sequences[0].tolist() and len(said) > len(ids) + 4
    wave, audio = wave[0, 0].numpy(), speech.audio
    assert speech.codes.shape == (FRAMES, CODE_GROUPS) and speech.sample_rate == 24_000
    # one window: the frames' samples less the few the decoder's last convolutions cut
    assert audio.shape == wave.shape and FRAMES * SAMPLES_PER_FRAME - len(audio) < 8
    assert np.abs(audio - wave).max() <= WAVE_TOLERANCE * np.abs(wave).max()


def test_the_parts_read_from_the_directory_speak_the_same(tiny_omni, model):
    """The talker and code2wav read from their own tensors (``load_talker``,
    ``Code2Wav.load``) make the same frames and samples as the loaded model's modules."""
    speaker = OmniSpeaker(model)
    _, inputs = speaker.answer(_chat(model.config, [11, 12, 13, 14]), REPLY)
    frames = list(TalkerFrames(load_talker(tiny_omni)).frames(
        inputs.prompt, inputs.text, inputs.pad, FRAMES))
    stream = Code2Wav.load(tiny_omni).stream()
    audio = np.concatenate([c for f in frames for c in stream.push(f)] + stream.finish())
    streamed = [(frame, chunks) for frame, chunks in speaker.stream(inputs, FRAMES)]
    assert torch.equal(torch.stack(frames), torch.stack([f for f, _ in streamed]))
    assert np.array_equal(audio, np.concatenate([c for _, cs in streamed for c in cs]))
