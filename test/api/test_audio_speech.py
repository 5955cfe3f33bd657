"""Which served model the audio routes take as a speech model (``audio.speech.speech_model``),
and, with Whisper's feature functions, that a clip becomes 30 s windows of log-mel features."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mstar.api_server.audio.speech import speech_model

GENERATION = {"decoder_start_token_id": 50257, "eos_token_id": 50256,
              "no_timestamps_token_id": 50362, "suppress_tokens": [1, 2]}


def model_dir(tmp_path, generation: dict | None):
    from transformers import WhisperFeatureExtractor

    WhisperFeatureExtractor().save_pretrained(tmp_path)
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    return tmp_path


@pytest.mark.parametrize("modalities,generation", [
    (("text",), GENERATION),  # a text model
    (("text", "audio"), None),  # no generation config
    (("text", "audio"), {"eos_token_id": 2}),  # an audio-in chat model: no Whisper tokens
])
def test_only_an_audio_model_with_whisper_tokens_transcribes(tmp_path, modalities, generation):
    assert speech_model(model_dir(tmp_path, generation), modalities) is None


def test_a_whisper_dir_gives_windows_of_log_mel_features(tmp_path):
    pytest.importorskip("mstar.models.audio.whisper_features")  # the whisper branch's
    speech = speech_model(model_dir(tmp_path, GENERATION), ("text", "audio"))
    assert speech is not None and speech.rate == 16_000
    assert speech.tokens.no_timestamps == 50362 and not speech.tokens.multilingual
    clip = np.zeros(45 * 16_000, np.float32)
    features, frames = speech.features(clip)
    assert frames == 4500
    window = speech.window(features, 3000, 1500)
    assert tuple(window.tensors["input_features"].shape) == (1, 80, 3000)
