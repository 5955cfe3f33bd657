"""What a WAV file's header claims, read by hand: libsndfile trusts the bytes it finds over the
header (a header claiming hours over one second of samples decodes as one second), so a header that
lies, or a file cut short, would pass unseen. The RIFF chunks are walked up to ``data``: its size
is the claim, the bytes after it what is there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

UNKNOWN_SIZE = (0, 0xFFFFFFFF)  # a streamed WAV's writer did not know its length: no claim
MAX_CHUNKS = 64  # a header is a few chunks; more is not a WAV worth walking


@dataclass(frozen=True)
class WavClaim:
    data_bytes: int  # the data chunk's size, as the header says
    present_bytes: int  # the bytes after the data chunk's header
    byte_rate: int  # from the fmt chunk (bytes per second of audio)

    @property
    def seconds(self) -> float:
        return self.data_bytes / self.byte_rate if self.byte_rate else 0.0

    @property
    def truncated(self) -> bool:
        return self.data_bytes > self.present_bytes


def wav_claim(data: bytes) -> WavClaim | None:
    """The data chunk's claim of a RIFF/WAVE file; None when there is none to check (not RIFF,
    no fmt or data chunk found, or a length left unknown by a streaming writer)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    offset, byte_rate = 12, 0
    for _ in range(MAX_CHUNKS):
        if offset + 8 > len(data):
            return None
        kind, size = data[offset:offset + 4], struct.unpack_from("<I", data, offset + 4)[0]
        if kind == b"fmt " and offset + 20 <= len(data):  # its byte rate: bytes 8..12
            byte_rate = struct.unpack_from("<I", data, offset + 16)[0]
        if kind == b"data":
            if size in UNKNOWN_SIZE:
                return None
            return WavClaim(size, len(data) - offset - 8, byte_rate)
        offset += 8 + size + (size & 1)  # chunks are padded to an even size
    return None
