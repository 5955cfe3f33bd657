"""A request's audio parts to clips, every bound checked before any sample is decoded.

For each part, in the media pool: its bytes (base64 decoded, refused past MSTAR_MAX_AUDIO_BYTES
before decoding) and its header (``audio_decode.read_header``; an input_audio part's ``format``
must name what its data is). Then the request's seconds, summed from the headers in part order,
are held to MSTAR_MAX_AUDIO_SECONDS_PER_REQUEST: the part past it is a 413 naming it. Then every
part is decoded, mixed down to mono and resampled to the model's rate, in the pool. All of it
within what is left of MSTAR_REQUEST_TIMEOUT_S (a 504).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass

import numpy as np

from mstar.api_server.http.deadline import seconds_left, timed_out
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.audio_decode import AudioHeader, check_format, decode_clip, read_header
from mstar.api_server.media.pool import all_done, in_media_pool


@dataclass(frozen=True)
class AudioLimits:
    max_bytes: int
    max_seconds: float
    max_request_seconds: float
    max_parts: int

    @classmethod
    def from_settings(cls, settings) -> AudioLimits:
        return cls(settings.max_audio_bytes, settings.max_audio_seconds,
                   settings.max_audio_seconds_per_request, settings.max_audio_parts_per_request)


@dataclass(frozen=True)
class AudioPart:
    """One clip of a request: an upload's bytes, or an input_audio part's base64 ``data``."""

    param: str  # ``file``, or messages.<i>.content.<j>.input_audio
    payload: bytes | str  # str: base64
    format: str | None = None  # what an input_audio part says its data is

    @property
    def format_param(self) -> str:
        return f"{self.param}.format"


def too_large(param: str, max_bytes: int) -> APIError:
    return APIError(413, f"`{param}`: the audio is larger than MSTAR_MAX_AUDIO_BYTES="
                    f"{max_bytes} bytes", param)


def part_bytes(part: AudioPart, max_bytes: int) -> bytes:
    payload = part.payload
    if isinstance(payload, str):
        if len(payload) * 3 // 4 > max_bytes + 2:  # refused before decoding the base64
            raise too_large(part.param, max_bytes)
        try:
            payload = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise APIError(400, f"`{part.param}.data`: malformed base64 ({exc})",
                           f"{part.param}.data") from exc
    if len(payload) > max_bytes:
        raise too_large(part.param, max_bytes)
    return payload


def opened(part: AudioPart, limits: AudioLimits) -> tuple[bytes, AudioHeader]:
    """The part's bytes and checked header (in the pool)."""
    data = part_bytes(part, limits.max_bytes)
    header = read_header(data, limits.max_seconds, part.param)
    check_format(header, part.format, part.format_param)
    return data, header


def check_request_seconds(parts: list[AudioPart], headers: list[AudioHeader],
                          limit: float) -> float:
    total = 0.0
    for part, header in zip(parts, headers, strict=True):
        total += header.seconds
        if total > limit:
            raise APIError(413, f"`{part.param}`: the request's audio comes to {total:.1f} s "
                           f"with this part; MSTAR_MAX_AUDIO_SECONDS_PER_REQUEST={limit:g}",
                           part.param)
    return total


async def load_clips(parts: list[AudioPart], limits: AudioLimits, rate: int,
                     timeout_s: float) -> list[np.ndarray]:
    """Each part as mono float32 samples at ``rate`` Hz, in part order."""
    try:
        return await asyncio.wait_for(_load(parts, limits, rate), max(0.0, seconds_left(timeout_s)))
    except asyncio.TimeoutError as exc:
        raise timed_out(timeout_s, " (decoding the audio)") from exc


async def _load(parts: list[AudioPart], limits: AudioLimits, rate: int) -> list[np.ndarray]:
    found = await all_done(in_media_pool(opened, part, limits) for part in parts)
    check_request_seconds(parts, [header for _, header in found], limits.max_request_seconds)
    return await all_done(in_media_pool(decode_clip, data, header, rate, part.param)
                          for part, (data, header) in zip(parts, found, strict=True))

