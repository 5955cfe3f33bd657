"""Audio bytes to one mono float32 clip at the model's rate, in two steps so that every bound is
decided before a sample is decoded (as ``decode.py`` does for images):

- ``read_header``: libsndfile's header (``soundfile.info``) and, for WAV, the RIFF claim
  (``audio_riff``: libsndfile trusts the bytes over a lying header). Refused, each a 4xx naming the
  part: an empty file, a format other than WAV, FLAC, MP3 or OGG (Vorbis, Opus), a header that
  claims more than MSTAR_MAX_AUDIO_SECONDS (413) or more bytes than the file holds (truncated),
  no samples, an absurd rate or channel count.
- ``decode_clip``: decoded in blocks, each mixed down to mono and resampled (soxr's stream) to
  the model's rate at once, so memory is the output's whatever the file's rate and channels; the
  decode stops at the header's frame count (which was bounded), and a file that ends well before
  it (an MP3 or FLAC cut short) is a 400.

Both run in the media pool (``pool.py``), never on the event loop.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.audio_riff import wav_claim

# libsndfile's major format -> the name a request uses for it
FORMATS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "MP3": "mp3", "OGG": "ogg"}
FORMAT_NAMES = ("wav", "mp3", "flac", "ogg", "opus")  # an input_audio part's ``format`` values
FORMAT_ALIASES = {"opus": "ogg"}  # Opus travels in an OGG container
MAX_RATE = 384_000  # Hz: the highest rate studio audio uses; more is a header to distrust
MAX_CHANNELS = 32
BLOCK_FRAMES = 65_536  # decoded per step: a block's memory is BLOCK_FRAMES x channels x 4 bytes
TRUNCATED_BELOW = 0.95  # decoded frames under this share of the header's count: cut short
ACCEPTED = "WAV, FLAC, MP3 or OGG (Vorbis, Opus)"


@dataclass(frozen=True)
class AudioHeader:
    format: str  # one of FORMATS' values
    frames: int
    rate: int
    channels: int

    @property
    def seconds(self) -> float:
        return self.frames / self.rate


def bad(param: str, why: str, status: int = 400) -> APIError:
    return APIError(status, f"`{param}`: {why}", param)


def too_long(param: str, seconds: float, max_seconds: float) -> APIError:
    return bad(param, f"the audio's header says it lasts {seconds:.1f} s; "
               f"MSTAR_MAX_AUDIO_SECONDS={max_seconds:g}", 413)


def read_header(data: bytes, max_seconds: float, param: str) -> AudioHeader:
    """The checked header of ``data``; nothing decoded."""
    if not data:
        raise bad(param, "the audio file is empty")
    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, ValueError, TypeError) as exc:  # LibsndfileError is a RuntimeError
        raise bad(param, f"not a {ACCEPTED} audio file") from exc
    if info.format not in FORMATS:
        raise bad(param, f"{info.format} audio is not taken; send {ACCEPTED}")
    if not (0 < info.samplerate <= MAX_RATE and 0 < info.channels <= MAX_CHANNELS):
        raise bad(param, f"the header's {info.samplerate} Hz x {info.channels} channels is not "
                  f"audio this server decodes (at most {MAX_RATE} Hz, {MAX_CHANNELS} channels)")
    claim = wav_claim(data) if info.format in ("WAV", "WAVEX") else None
    if claim is not None and claim.seconds > max_seconds:
        raise too_long(param, claim.seconds, max_seconds)
    if claim is not None and claim.truncated:
        raise bad(param, f"the WAV header claims {claim.data_bytes} bytes of samples; the file "
                  f"holds {claim.present_bytes} (truncated, or a header that lies)")
    header = AudioHeader(FORMATS[info.format], int(info.frames), int(info.samplerate),
                         int(info.channels))
    if header.frames <= 0:
        raise bad(param, "the audio holds no samples")
    if header.seconds > max_seconds:
        raise too_long(param, header.seconds, max_seconds)
    return header


def check_format(header: AudioHeader, stated: str | None, param: str) -> None:
    """An input_audio part's ``format`` must name what its data is (``param``: the format's)."""
    if stated is None:
        return
    if stated not in FORMAT_NAMES:
        raise bad(param, f"{stated[:20]!r} is not one of {', '.join(FORMAT_NAMES)}")
    if FORMAT_ALIASES.get(stated, stated) != header.format:
        raise bad(param, f"the part says {stated!r}, its data is {header.format}")


def decode_clip(data: bytes, header: AudioHeader, rate: int, param: str) -> np.ndarray:
    """The audio as mono float32 samples at ``rate`` Hz (a checked header: ``read_header``)."""
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            return _decoded(sound, header, rate, param)
    except APIError:
        raise
    except (RuntimeError, ValueError, TypeError, MemoryError) as exc:
        raise bad(param, f"the audio data is damaged ({str(exc)[:120]})") from exc


def _decoded(sound: soundfile.SoundFile, header: AudioHeader, rate: int,
             param: str) -> np.ndarray:
    stream = None if header.rate == rate else soxr.ResampleStream(header.rate, rate, 1,
                                                                   dtype="float32")
    pieces, decoded = [], 0
    while decoded < header.frames:  # soundfile stops at the header's count, never past it
        block = sound.read(min(BLOCK_FRAMES, header.frames - decoded), dtype="float32",
                           always_2d=True)
        if not len(block):
            break
        decoded += len(block)
        mono = block.mean(axis=1, dtype=np.float32) if header.channels > 1 else block[:, 0]
        pieces.append(mono if stream is None else stream.resample_chunk(mono))
    if decoded < header.frames * TRUNCATED_BELOW:
        raise bad(param, f"the audio ends after {decoded} of the {header.frames} samples its "
                  "header announces (truncated)")
    if stream is not None:
        pieces.append(stream.resample_chunk(np.zeros(0, np.float32), last=True))
    return np.ascontiguousarray(np.concatenate(pieces), dtype=np.float32)
