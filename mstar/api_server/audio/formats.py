"""A finished transcription in each of OpenAI's response formats: ``json`` ({"text"}),
``text`` (the text), ``srt`` and ``vtt`` (numbered cues, timed to the millisecond),
``verbose_json`` (task, language, duration, text and the segments). Segments here are decoded:
their text and the numbers OpenAI reports for each (``Spoken``)."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse, Response


@dataclass(frozen=True)
class Spoken:
    """One segment of the transcript, decoded."""

    start: float
    end: float
    text: str
    token_ids: tuple[int, ...]
    seek: int  # the first mel frame of the window that made it
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0  # the window's (mstar.engine.runner.no_speech)


@dataclass(frozen=True)
class Transcript:
    task: str  # "transcribe" or "translate"
    language: str  # OpenAI's name for it ("english")
    duration: float  # seconds of audio
    segments: list[Spoken]
    temperature: float

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()


def usage(duration: float) -> dict[str, Any]:
    """OpenAI's usage of a duration-billed model: whole seconds, rounded up."""
    return {"type": "duration", "seconds": math.ceil(duration)}


def compression_ratio(text: str) -> float:
    """Whisper's repetition gauge: the text's bytes over their zlib-compressed bytes."""
    data = text.encode()
    return len(data) / len(zlib.compress(data)) if data else 0.0


def clock(seconds: float, decimal: str) -> str:
    """HH:MM:SS<decimal>mmm, as SRT (',') and WebVTT ('.') write a cue's time."""
    millis = round(max(0.0, seconds) * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{millis:03d}"


def srt(t: Transcript) -> str:
    return "".join(f"{i}\n{clock(s.start, ',')} --> {clock(s.end, ',')}\n{s.text.strip()}\n\n"
                   for i, s in enumerate(t.segments, 1))


def vtt(t: Transcript) -> str:
    return "WEBVTT\n\n" + "".join(f"{clock(s.start, '.')} --> {clock(s.end, '.')}\n"
                                  f"{s.text.strip()}\n\n" for s in t.segments)


def verbose(t: Transcript) -> dict[str, Any]:
    segments = [{"id": i, "seek": s.seek, "start": round(s.start, 2), "end": round(s.end, 2),
                 "text": s.text, "tokens": list(s.token_ids), "temperature": t.temperature,
                 "avg_logprob": s.avg_logprob, "compression_ratio": compression_ratio(s.text),
                 "no_speech_prob": s.no_speech_prob} for i, s in enumerate(t.segments)]
    return {"task": t.task, "language": t.language, "duration": round(t.duration, 2),
            "text": t.text, "segments": segments, "usage": usage(t.duration)}


def response(t: Transcript, response_format: str) -> Response:
    if response_format == "text":
        return PlainTextResponse(t.text)
    if response_format == "srt":
        return PlainTextResponse(srt(t))
    if response_format == "vtt":
        return PlainTextResponse(vtt(t), media_type="text/vtt")
    if response_format == "verbose_json":
        return JSONResponse(verbose(t))
    return JSONResponse({"text": t.text, "usage": usage(t.duration)})
