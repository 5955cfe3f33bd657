"""The multipart form of POST /v1/audio/transcriptions and /v1/audio/translations, in OpenAI's
names (arrays as ``name[]``, as OpenAI's clients send them). Every field OpenAI defines is declared,
so that it appears in /openapi.json, and is taken or refused by name (a 400 naming it); the field
table (``validation.audio_rows``, docs/openai_api.rst) says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import File, Form, UploadFile

from mstar.api_server.http.errors import APIError

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
TIMED_FORMATS = ("srt", "verbose_json", "vtt")  # the formats made of timed segments
STREAMED_FORMATS = ("json", "text")
GRANULARITIES = "timestamp_granularities[]"
MAX_TEMPERATURE = 1.0  # OpenAI's range for audio: 0 .. 1
REFUSED = {  # declared OpenAI fields mstar does not offer -> why
    "include[]": "no token logprobs in transcriptions",
    "chunking_strategy": "the audio is cut into Whisper's 30 s windows, no voice detection",
    "known_speaker_names[]": "no diarization",
    "known_speaker_references[]": "no diarization",
    "languages[]": "give one language in `language`",
    "keywords[]": "no keyword boosting",
}

FileField = Annotated[UploadFile | None, File(description="WAV, FLAC, MP3 or OGG (Vorbis, Opus) audio, "
                                       "at most MSTAR_MAX_AUDIO_BYTES and MSTAR_MAX_AUDIO_SECONDS.")]
Text = str | None
Many = list[str] | None


def _form(description: str, alias: str | None = None):
    return Form(description=description, alias=alias)


ModelField = Annotated[Text, _form("The served model (or an alias); may be omitted.")]
FormatField = Annotated[Text, _form("json (default), text, srt, verbose_json or vtt.")]
TemperatureField = Annotated[Text, _form("0 .. 1; 0 is greedy (no temperature fallback).")]


@dataclass(frozen=True)
class AudioForm:
    file: UploadFile
    task: str  # "transcribe" or "translate"
    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    stream: bool = False
    granularities: tuple[str, ...] = ()

    @property
    def timed(self) -> bool:
        """Whether the response is made of timed segments."""
        return self.response_format in TIMED_FORMATS


def _flag(value: str | None, name: str) -> bool:
    if value is None or value.lower() in ("false", "0"):
        return False
    if value.lower() in ("true", "1"):
        return True
    raise APIError(400, f"`{name}` must be true or false, not {value[:20]!r}", name)


def _temperature(value: str | None) -> float:
    try:
        temperature = 0.0 if value is None else float(value)
    except ValueError:
        temperature = -1.0
    if not 0.0 <= temperature <= MAX_TEMPERATURE:
        raise APIError(400, f"`temperature` must be a number in [0, {MAX_TEMPERATURE:g}] (0 is "
                       f"greedy), not {str(value)[:20]!r}", "temperature")
    return temperature


def _response_format(value: str | None) -> str:
    if value is None:
        return "json"
    if value not in FORMATS:
        raise APIError(400, f"`response_format` is not supported: {value[:40]!r} (one of "
                       f"{', '.join(FORMATS)})", "response_format")
    return value


def _granularities(values: list[str] | None, response_format: str) -> tuple[str, ...]:
    for value in values or []:
        if value == "word":
            raise APIError(400, f"`{GRANULARITIES}` is not supported: 'word' (word timestamps "
                           "are not computed; 'segment' is)", GRANULARITIES)
        if value != "segment":
            raise APIError(400, f"`{GRANULARITIES}`: {value[:20]!r} is not 'segment'",
                           GRANULARITIES)
    if values and response_format != "verbose_json":
        raise APIError(400, f"`{GRANULARITIES}` needs response_format verbose_json",
                       GRANULARITIES)
    return tuple(values or ())


def check_refused(given: dict[str, object]) -> None:
    """A declared field mstar does not offer, sent: a 400 naming it."""
    for name, value in given.items():
        if value not in (None, []):
            raise APIError(400, f"`{name}` is not supported: {REFUSED[name]}", name)


def audio_form(file: UploadFile | None, task: str, model: Text, language: Text, prompt: Text,
               response_format: Text, temperature: Text, stream: Text = None,
               granularities: Many = None) -> AudioForm:
    if file is None or isinstance(file, str):  # absent, or sent as a plain field
        raise APIError(400, "`file` is required: the audio, as a file part of the form", "file")
    fmt = _response_format(response_format)
    streamed = _flag(stream, "stream")
    if streamed and fmt not in STREAMED_FORMATS:
        raise APIError(400, "`stream`: streamed events carry text; response_format must be json "
                       "or text", "stream")
    return AudioForm(file, task, model, language or None, prompt or None, fmt,
                     _temperature(temperature), streamed, _granularities(granularities, fmt))


async def transcription_form(
    file: FileField = None,
    model: ModelField = None,
    language: Annotated[Text, _form("The audio's language (ISO-639-1). An English-only model "
                                    "takes only 'en'; a multilingual one needs it.")] = None,
    prompt: Annotated[Text, _form("Text the model continues from (Whisper's previous-text "
                                  "prompt), used for the first 30 s window.")] = None,
    response_format: FormatField = None,
    temperature: TemperatureField = None,
    stream: Annotated[Text, _form("true: transcript.text.delta events, then "
                                  "transcript.text.done (json and text formats).")] = None,
    timestamp_granularities: Annotated[Many, _form("'segment' (needs verbose_json); 'word' is a "
                                                   "400.", GRANULARITIES)] = None,
    include: Annotated[Many, _form("Refused: " + REFUSED["include[]"], "include[]")] = None,
    chunking_strategy: Annotated[Text, _form("Refused: " + REFUSED["chunking_strategy"])] = None,
    known_speaker_names: Annotated[Many, _form("Refused: no diarization.",
                                               "known_speaker_names[]")] = None,
    known_speaker_references: Annotated[Many, _form("Refused: no diarization.",
                                                    "known_speaker_references[]")] = None,
    languages: Annotated[Many, _form("Refused: " + REFUSED["languages[]"], "languages[]")] = None,
    keywords: Annotated[Many, _form("Refused: " + REFUSED["keywords[]"], "keywords[]")] = None,
) -> AudioForm:
    check_refused({"include[]": include, "chunking_strategy": chunking_strategy,
                   "known_speaker_names[]": known_speaker_names,
                   "known_speaker_references[]": known_speaker_references,
                   "languages[]": languages, "keywords[]": keywords})
    return audio_form(file, "transcribe", model, language, prompt, response_format, temperature,
                      stream, timestamp_granularities)


async def translation_form(
    file: FileField = None,
    model: ModelField = None,
    prompt: Annotated[Text, _form("Text the model continues from (in English), used for the "
                                  "first 30 s window.")] = None,
    response_format: FormatField = None,
    temperature: TemperatureField = None,
    language: Annotated[Text, _form("Extra: the audio's language (ISO-639-1), which a "
                                    "multilingual model needs (no language detection).")] = None,
) -> AudioForm:
    return audio_form(file, "translate", model, language, prompt, response_format, temperature)
