"""Whisper's audio windows as ``AudioInput``s, from transformers' ``WhisperFeatureExtractor``.

A clip of at most 30 s is one window (``whisper_input``): the extractor pads it to 30 s and
computes its log-mel features alone. Longer audio follows transformers' long-form ``generate``:
the features of the whole clip are computed once (``long_features``), and each window is a
3000-frame slice from the seek point, zero-padded in feature space (``window_input``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mstar.models.audio.inputs import AudioInput
from mstar.models.audio.whisper_units import FRAMES_PER_SECOND, WINDOW_FRAMES
from mstar.models.vision.inputs import content_hash

if TYPE_CHECKING:
    import numpy
    import torch


def whisper_input(feature_extractor, clip: numpy.ndarray) -> AudioInput:
    """One <= 30 s window: mono float32 at ``feature_extractor.sampling_rate``."""
    rate = feature_extractor.sampling_rate
    out = feature_extractor(clip, sampling_rate=rate, return_tensors="pt")
    tensors = {"input_features": out["input_features"]}
    return AudioInput(content_hash(tensors), tensors, (), len(clip) / rate)


def long_features(feature_extractor, clip: numpy.ndarray) -> tuple[torch.Tensor, int]:
    """The clip's features [1, mels, frames] and its frame count, as transformers' long-form
    generate gets them. A clip of at most 30 s is padded to one full window and counts 3000
    frames (transformers' short form)."""
    rate = feature_extractor.sampling_rate
    if len(clip) <= feature_extractor.n_samples:
        out = feature_extractor(clip, sampling_rate=rate, return_tensors="pt")
        return out["input_features"], out["input_features"].shape[-1]
    out = feature_extractor(clip, sampling_rate=rate, return_tensors="pt", truncation=False,
                            padding="longest", return_attention_mask=True)
    return out["input_features"], int(out["attention_mask"].sum())


def window_input(features: torch.Tensor, seek: int, num_frames: int) -> AudioInput:
    """The window of ``num_frames`` frames from ``seek``, zero-padded to 3000 frames."""
    import torch

    window = features[:, :, seek:seek + num_frames]
    if window.shape[-1] < WINDOW_FRAMES:
        window = torch.nn.functional.pad(window, (0, WINDOW_FRAMES - window.shape[-1]))
    tensors = {"input_features": window.contiguous()}
    return AudioInput(content_hash(tensors), tensors, (), num_frames / FRAMES_PER_SECOND)
