"""Speech audio in ``/v1/audio/speech``'s response formats: ``wav`` (16-bit PCM, mono, through
Python's ``wave``: any WAV reader parses it) and ``pcm`` (the same samples raw, little-endian,
as OpenAI's ``pcm``). The codec's float32 samples are clipped to [-1, 1] and rounded to 16 bits,
so a sample is within half a step (1 / 65534) of the clipped float."""

from __future__ import annotations

import io
import wave

import numpy as np

FORMATS = ("wav", "pcm")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm"}
FULL_SCALE = 32767


def pcm16(samples: bytes) -> bytes:
    """Little-endian float32 samples (an ``AudioChunk``'s) as little-endian int16."""
    floats = np.frombuffer(samples, dtype="<f4")
    return np.round(np.clip(floats, -1.0, 1.0) * FULL_SCALE).astype("<i2").tobytes()


def wav(pcm: bytes, rate: int) -> bytes:
    """A whole mono 16-bit WAV file around ``pcm``."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm)
    return out.getvalue()
