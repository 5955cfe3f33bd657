"""The served speech model as the audio routes see it, read once at start: what turns a clip into
the encoder's input, as transformers' long-form ``generate`` does (the whole clip's log-mel
features once, then each 30 s window a slice of them: ``mstar.models.audio.whisper_features``; in
the media pool), its rate, and Whisper's special tokens (``mstar.prompt.transcription.WhisperTokens``, from
generation_config.json). A model that takes audio and whose generation config names Whisper's
transcription tokens serves the routes; any other model answers them with a 400 naming ``model``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from mstar.models.audio.inputs import AudioInput
from mstar.prompt.transcription import WhisperTokens

# the clip -> its features and their frame count (a clip of <= 30 s: one window, 3000 frames)
Features = Callable[[np.ndarray], tuple[Any, int]]
# (the features, the window's first frame, its frames) -> the window's encoder input
Window = Callable[[Any, int, int], AudioInput]


@dataclass(frozen=True)
class SpeechModel:
    features: Features
    window: Window
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

    from mstar.models.audio.whisper_features import long_features, window_input

    extractor = AutoFeatureExtractor.from_pretrained(model_dir)
    return SpeechModel(partial(long_features, extractor), window_input,
                       int(extractor.sampling_rate), WhisperTokens.from_generation_config(gen))
