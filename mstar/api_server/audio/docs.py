"""The published schema of the audio routes' responses (documentation only: the routes build their
bodies directly, ``formats``). srt, vtt and text answer text; json and verbose_json these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class DurationUsage(BaseModel):
    type: Literal["duration"]
    seconds: int


class TranscriptSegment(BaseModel):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class Transcription(BaseModel):
    """``response_format`` json (the default); verbose_json adds task, language, duration and
    segments (``TranscriptionVerbose``)."""

    text: str
    usage: DurationUsage | None = None


class TranscriptionVerbose(Transcription):
    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    segments: list[TranscriptSegment]


class TranscriptEvent(BaseModel):
    """One event of ``stream=true``: transcript.text.delta events (``delta``), then one
    transcript.text.done (``text``, ``usage``)."""

    type: Literal["transcript.text.delta", "transcript.text.done"]
    delta: str | None = None
    text: str | None = None
    usage: DurationUsage | None = None
