"""Speech audio in the response formats of ``/v1/audio/speech`` and of chat's
``message.audio`` (``openai.chat_audio``), all from the codec's float32 samples clipped to
[-1, 1] and rounded to 16 bits (``pcm16``: a sample is within half a step, 1 / 65534,
of the clipped float). Two families, one encoder each:

- **framed here**: ``pcm`` (the 16-bit samples raw, little-endian, as OpenAI's ``pcm``) and
  ``wav`` (16-bit PCM, mono, through Python's ``wave``: any WAV reader parses it);
- **libsndfile** (``soundfile``, which bundles it with its FLAC, Ogg/Opus and LAME encoders):
  ``flac`` (lossless: the 16-bit samples exactly), ``mp3`` (MPEG layer III) and ``opus`` (Ogg
  Opus, OpenAI's ``opus``). MP3 and Opus take only some rates (``SoundFormat.rates``): another
  codec rate is resampled with soxr to the lowest one they take above it (``codec_rate``).

``aac`` has no encoder here (libsndfile has none): it stays a 400 naming ``response_format``.

Streamed (``stream_format: "audio"``), a format's bytes leave as they encode, so only a format
whose encoder only appends can stream (``SoundFormat.streams``): pcm, wav (its header first,
with both sizes, RIFF's and data's, 0xFFFFFFFF: the streaming convention, ffmpeg's for an
unseekable output; readers take the data as running to the end of the file) and Ogg Opus (pages
follow pages). libsndfile's FLAC and MP3 writers go back at the close: FLAC's STREAMINFO gets its
sample count and MD5, MP3's first frame (LAME's info frame) its frame count and the encoder's
delay and padding; as first written, libsndfile cannot read the FLAC and decodes the MP3 short.
So those two are whole-file only (``speak_protocol.check_stream_format``)."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from typing import Any

import numpy as np

FULL_SCALE = 32767
UNKNOWN_SIZE = (0xFFFFFFFF).to_bytes(4, "little")  # a streamed WAV's RIFF and data sizes
RIFF_SIZE, DATA_SIZE = slice(4, 8), slice(40, 44)  # where the canonical 44-byte header has them
MPEG_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)  # MPEG-1, 2, 2.5
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


@dataclass(frozen=True)
class SoundFormat:
    media_type: str
    streams: bool  # its bytes can leave as they encode (its encoder only appends)
    sndfile: tuple[str, str] | None = None  # libsndfile's (format, subtype); None: framed here
    rates: tuple[int, ...] = ()  # the codec rates the encoder takes; empty: any


FORMATS = {"wav": SoundFormat("audio/wav", True), "pcm": SoundFormat("audio/pcm", True),
           "flac": SoundFormat("audio/flac", False, ("FLAC", "PCM_16")),
           "mp3": SoundFormat("audio/mpeg", False, ("MP3", "MPEG_LAYER_III"), MPEG_RATES),
           # RFC 7845's media type for an Ogg Opus file ("audio/opus" is Opus over RTP)
           "opus": SoundFormat("audio/ogg", True, ("OGG", "OPUS"), OPUS_RATES)}
NO_ENCODER = {"aac": "libsndfile, the encoder here, has no AAC encoder"}


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


def codec_rate(fmt: SoundFormat, rate: int) -> int:
    """The rate ``fmt`` is encoded at: the codec's own when the encoder takes it, else the
    lowest rate it takes above it (no band is lost), else its highest."""
    if not fmt.rates or rate in fmt.rates:
        return rate
    return min((r for r in fmt.rates if r > rate), default=max(fmt.rates))


def encode(name: str, pcm: bytes, rate: int) -> bytes:
    """A whole file of format ``name`` from 16-bit ``pcm`` at ``rate``."""
    if name == "pcm":
        return pcm
    if name == "wav":
        return wav(pcm, rate)
    out = io.BytesIO()
    with SndfileEncoder(FORMATS[name], rate, out) as encoder:
        encoder.push(pcm)
    return out.getvalue()


class AppendedBytes:
    """An unseekable sink for libsndfile: it keeps the bytes appended since the last ``take``.
    libsndfile asks for seeks to where it already is (at open); a seek anywhere else (a writer
    going back to fill in a header) marks ``rewound``: that format cannot stream."""

    def __init__(self) -> None:
        self._new, self._end, self.rewound = bytearray(), 0, False

    def write(self, data: Any) -> int:
        self._new += data
        self._end += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset if whence == 0 else self._end + offset) != self._end:
            self.rewound = True
        return self._end

    def tell(self) -> int:
        return self._end

    def take(self) -> bytes:
        new, self._new = bytes(self._new), bytearray()
        return new


class SndfileEncoder:
    """One libsndfile encoder over a request's audio: 16-bit pcm in (``push``), in chunks or
    whole, resampled to ``codec_rate`` on the way (soxr's stream, so chunks join seamlessly);
    its bytes go to ``sink`` (a file, or ``AppendedBytes`` when streaming). ``close`` flushes
    the resampler and the encoder's last frames or pages."""

    def __init__(self, fmt: SoundFormat, rate: int, sink: Any) -> None:
        import soundfile
        import soxr

        assert fmt.sndfile is not None, "a libsndfile format"
        self.rate = codec_rate(fmt, rate)
        self._resampler = (soxr.ResampleStream(rate, self.rate, 1, dtype="int16")
                           if self.rate != rate else None)
        container, subtype = fmt.sndfile
        self._file = soundfile.SoundFile(sink, "w", self.rate, 1, subtype, format=container)

    def push(self, pcm: bytes, last: bool = False) -> None:
        samples = np.frombuffer(pcm, dtype="<i2")
        if self._resampler is not None:
            samples = self._resampler.resample_chunk(samples, last=last)
        if len(samples):
            self._file.write(samples)

    def close(self) -> None:
        if self._file.closed:
            return
        if self._resampler is not None:
            self.push(b"", last=True)
        self._file.close()

    def __enter__(self) -> SndfileEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StreamedSound:
    """A streamed answer's bytes in a format that streams (``SoundFormat.streams``), made when
    the first audio brings the rate: ``push`` each chunk's 16-bit pcm and send what it returns
    (a WAV's header comes with the first), then send ``finish``'s rest (Ogg's last pages).
    ``close`` (a client gone) drops the encoder."""

    def __init__(self, name: str, rate: int) -> None:
        fmt = FORMATS[name]
        assert fmt.streams, f"{name} does not stream"
        self._head = streamed_wav_header(rate) if name == "wav" else b""
        self._sink = AppendedBytes()
        self._encoder = SndfileEncoder(fmt, rate, self._sink) if fmt.sndfile else None

    def push(self, pcm: bytes) -> bytes:
        head, self._head = self._head, b""
        if self._encoder is None:
            return head + pcm
        self._encoder.push(pcm)
        return head + self._taken()

    def finish(self) -> bytes:
        self.close()
        return self._taken()

    def close(self) -> None:
        if self._encoder is not None:
            self._encoder.close()

    def _taken(self) -> bytes:
        if self._sink.rewound:  # FORMATS says it streams, but its writer went back
            raise RuntimeError("a streamed format's encoder seeked back into sent bytes")
        return self._sink.take()
