"""The served speech model as the audio routes see it, read once at start: what turns a clip into
the encoder's input (the model's transformers feature extractor, in the media pool), its rate, and
Whisper's special tokens (``mstar.prompt.transcription.WhisperTokens``, from
generation_config.json). A model that takes audio and whose generation config names Whisper's
transcription tokens serves the routes; any other model answers them with a 400 naming ``model``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from mstar.models.audio.inputs import AudioInput
from mstar.prompt.transcription import WhisperTokens

Features = Callable[[np.ndarray], AudioInput]  # one window's clip (<= 30 s) -> its encoder input


@dataclass(frozen=True)
class SpeechModel:
    features: Features
    rate: int  # the feature extractor's sampling rate (16 kHz for Whisper)
    tokens: WhisperTokens


def speech_model(model_dir: Path, modalities: tuple[str, ...]) -> SpeechModel | None:
    """The speech model served from ``model_dir``; None when it does not transcribe."""
    if "audio" not in modalities:
        return None
    try:
        gen = json.loads((Path(model_dir) / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(gen, dict) or "no_timestamps_token_id" not in gen:
        return None  # an audio-in chat model (Qwen2-Audio, Voxtral): chat's input_audio parts
    from transformers import AutoFeatureExtractor

    from mstar.models.audio.whisper_features import whisper_input

    extractor = AutoFeatureExtractor.from_pretrained(model_dir)
    return SpeechModel(partial(whisper_input, extractor), int(extractor.sampling_rate),
                       WhisperTokens.from_generation_config(gen))
