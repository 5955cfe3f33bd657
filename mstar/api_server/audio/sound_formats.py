"""Speech audio in ``/v1/audio/speech``'s response formats: ``wav`` (16-bit PCM, mono, through
Python's ``wave``: any WAV reader parses it) and ``pcm`` (the same samples raw, little-endian,
as OpenAI's ``pcm``). The codec's float32 samples are clipped to [-1, 1] and rounded to 16 bits,
so a sample is within half a step (1 / 65534) of the clipped float.

A streamed WAV (``stream_format: "audio"``) starts before its length is known: its header is the
whole file's with both sizes (RIFF's and data's) 0xFFFFFFFF, the streaming convention (ffmpeg's
for an unseekable output; readers take the data as running to the end of the file), and the pcm
follows as it decodes."""

from __future__ import annotations

import io
import wave

import numpy as np

FORMATS = ("wav", "pcm")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm"}
FULL_SCALE = 32767
UNKNOWN_SIZE = (0xFFFFFFFF).to_bytes(4, "little")  # a streamed WAV's RIFF and data sizes
RIFF_SIZE, DATA_SIZE = slice(4, 8), slice(40, 44)  # where the canonical 44-byte header has them


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


def streamed_wav_header(rate: int) -> bytes:
    """The header of a WAV whose length is not yet known: ``wav``'s, sizes 0xFFFFFFFF."""
    header = bytearray(wav(b"", rate))
    header[RIFF_SIZE] = header[DATA_SIZE] = UNKNOWN_SIZE
    return bytes(header)
