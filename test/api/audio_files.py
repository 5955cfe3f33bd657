"""Audio files made in code for the audio tests: a sine in each container soundfile writes, and
the damaged ones a server must refuse (a WAV header that lies, files cut short)."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

SUBTYPES = {"WAV": "PCM_16", "FLAC": "PCM_16", "OGG": "VORBIS", "MP3": "MPEG_LAYER_III"}


def sine(seconds: float, rate: int, channels: int = 1, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)
    return wave if channels == 1 else np.stack([wave] * channels, axis=1)


def encoded(fmt: str = "WAV", seconds: float = 1.0, rate: int = 16_000, channels: int = 1,
            subtype: str | None = None) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, sine(seconds, rate, channels), rate, format=fmt,
                    subtype=subtype or SUBTYPES[fmt])
    return out.getvalue()


def lying_wav(claimed_bytes: int = 0x7FFFFFF0) -> bytes:
    """A one-second WAV whose header claims ``claimed_bytes`` of samples (hours, by default)."""
    data = bytearray(encoded("WAV"))
    data[40:44] = struct.pack("<I", claimed_bytes)
    data[4:8] = struct.pack("<I", claimed_bytes + 36)
    return bytes(data)


def cut(data: bytes, keep: float = 0.5) -> bytes:
    return data[: int(len(data) * keep)]
