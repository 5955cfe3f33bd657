"""Chat completions with audio out (``modalities: ["text", "audio"]``, ``audio: {voice,
format}``), in OpenAI's shapes, for a model whose walk graph emits text and audio (Qwen3-Omni:
thinker -> talker -> code2wav).

The request's rules (each one function, each 400 naming its field) run before any work
(``check_chat_audio``); the voice becomes ``SamplingParams.speaker`` (``spoken_jobs``), and the
worker's outputs then carry the reply's audio (``RequestOutput.new_audio``: float32 samples and
a rate) beside its tokens. The reply's text is the audio's transcript:

- not streamed: ``message.audio = {id, data, expires_at, transcript}``, ``data`` the whole file
  in ``audio.format`` (base64; ``sound_formats`` encodes it), ``message.content`` null;
- streamed (pcm16 only, as OpenAI): ``delta.audio`` chunks, each with the reply's ``id``: the
  text as ``transcript`` deltas, each decoded chunk's 16-bit pcm as base64 ``data``, and last
  one with only ``expires_at``.

Nothing is kept for a later turn, so ``expires_at`` is the reply's creation time (a later
message cannot refer to the audio by id: an assistant message's ``audio`` is an unknown field,
handled as MSTAR_UNKNOWN_REQUEST_FIELDS says).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from mstar.api_server.context.served import ServedModel
from mstar.api_server.generation.choice import Choice
from mstar.api_server.generation.run import Job
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.sound_formats import FORMATS, NO_ENCODER, encode, pcm16
from mstar.api_server.openai.chat_output import StreamedChoice
from mstar.api_server.openai.chat_plan import OutputReading
from mstar.output.processor import TextOutput

# OpenAI's audio.format -> sound_formats' name, for those sound_formats makes (not aac)
OPENAI_FORMATS = {"wav": "wav", "mp3": "mp3", "flac": "flac", "opus": "opus", "pcm16": "pcm",
                  "aac": "aac"}
CHAT_FORMATS = {name: ours for name, ours in OPENAI_FORMATS.items() if ours in FORMATS}
STREAM_FORMATS = ("pcm16",)  # what OpenAI streams (sound_formats streams pcm as it decodes)
SILENT_RATE = 24_000  # the rate of a reply that decoded no audio at all (an empty file)


def speaks(req: Any) -> bool:
    """Whether a chat request asks for audio out."""
    return "audio" in (req.modalities or [])


def check_text_modality(req: Any) -> None:
    if req.modalities is not None and "text" not in req.modalities:
        raise APIError(400, 'modalities must hold "text" (the reply\'s transcript): ["text"] or '
                       '["text", "audio"]', "modalities")


def check_audio_out(req: Any, model: ServedModel) -> None:
    if speaks(req) and "audio" not in model.outputs:
        raise APIError(400, f"the served model {model.name} does not speak (its graph emits no "
                       "audio): modalities may only be [\"text\"]", "modalities")


def check_audio_given(req: Any) -> None:
    if speaks(req) and req.audio is None:
        raise APIError(400, 'modalities ["text", "audio"] needs audio: {voice, format}', "audio")


def check_audio_asked(req: Any) -> None:
    if req.audio is not None and not speaks(req):
        raise APIError(400, 'audio needs "audio" in modalities', "audio")


def check_audio_format(req: Any) -> None:
    if req.audio is None or req.audio.format in CHAT_FORMATS:
        return
    why = NO_ENCODER.get(req.audio.format, "unknown format")
    raise APIError(400, f"audio.format {req.audio.format!r} is not supported ({why}); one of "
                   f"{', '.join(CHAT_FORMATS)}", "audio.format")


def check_voice(req: Any, model: ServedModel) -> None:
    if req.audio is None or voice_of(req.audio.voice, model) is not None:
        return
    raise APIError(400, f"unknown voice {req.audio.voice!r}; the served model's voices: "
                   f"{', '.join(model.voices) or 'none'}", "audio.voice")


def check_audio_choices(req: Any) -> None:
    if speaks(req) and req.n > 1:
        raise APIError(400, "n > 1 with audio out is not supported: one spoken choice", "n")


def check_audio_stream(req: Any) -> None:
    if speaks(req) and req.stream and req.audio is not None and (
            req.audio.format not in STREAM_FORMATS):
        raise APIError(400, f"a streamed reply's audio is pcm16 only (as OpenAI's), not "
                       f"{req.audio.format!r}: set audio.format pcm16 or stream false", "stream")


def check_chat_audio(model: ServedModel) -> Callable[[Any], None]:
    """A chat request's audio rules for the served model (a gate rule)."""
    def check(req: Any) -> None:
        check_text_modality(req)
        check_audio_out(req, model)
        check_audio_given(req)
        check_audio_asked(req)
        check_audio_format(req)
        check_voice(req, model)
        check_audio_choices(req)
        check_audio_stream(req)
    return check


def voice_of(voice: str, model: ServedModel) -> str | None:
    """The model's voice ``voice`` names (case-insensitive: Qwen3-Omni's are lower case)."""
    return next((v for v in model.voices if v.lower() == voice.lower()), None)


def spoken_jobs(req: Any, model: ServedModel, jobs: list[Job]) -> list[Job]:
    """The jobs with the request's voice as their speaker (unchanged without audio out); the
    voice passed ``check_voice``."""
    if not speaks(req):
        return jobs
    speaker = voice_of(req.audio.voice, model)
    return [(prompt, msgspec.structs.replace(params, speaker=speaker)) for prompt, params in jobs]


def new_audio_id() -> str:
    return f"audio_{uuid.uuid4().hex[:24]}"


def reply_audio(choice: Choice, chat_format: str, created: int) -> dict[str, Any]:
    """A non-streamed choice's ``message.audio`` (its transcript filled in by the route)."""
    rate = choice.audio_rate or SILENT_RATE
    data = encode(CHAT_FORMATS[chat_format], pcm16(bytes(choice.audio)), rate)
    return {"id": new_audio_id(), "data": base64.b64encode(data).decode("ascii"),
            "expires_at": created, "transcript": ""}


def spoken_message(message: dict[str, Any], audio: dict[str, Any]) -> dict[str, Any]:
    """The assistant message with its text as the audio's transcript, content null (OpenAI's)."""
    return {**message, "content": None,
            "audio": {**audio, "transcript": message.get("content") or ""}}


class SpokenChoice:
    """One streamed choice of a spoken reply: ``StreamedChoice``'s chunks with content as
    ``delta.audio.transcript``, then each output's audio as ``delta.audio.data``, then (at the
    finish) the ``expires_at`` chunk; every audio delta carries the reply's id, the first also
    ``expires_at``."""

    def __init__(self, reading: OutputReading, created: int) -> None:
        self._text = StreamedChoice(reading)
        self._id, self._expires_at, self._started = new_audio_id(), created, False

    def chunks(self, item: dict[str, Any], out: TextOutput) -> list[dict[str, Any]]:
        text = self._text.chunks(item, out.new_text, out.finished)
        reason = text[-1]["finish_reason"] if text else item["finish_reason"]
        logprobs = text[0]["logprobs"] if text else item["logprobs"]
        deltas = [self._transcript(c["delta"]) for c in text if c["delta"]]
        if out.new_audio is not None and out.new_audio.samples:
            data = base64.b64encode(pcm16(out.new_audio.samples)).decode("ascii")
            deltas.append({"audio": {"data": data}})
        if out.finished:
            deltas.append({"audio": {"expires_at": self._expires_at}})
        deltas = [self._identified(d) for d in deltas]
        if not deltas:
            return [{**item, "delta": {}, "finish_reason": reason}] if (
                reason is not None or logprobs) else []
        chunks = [{**item, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
        chunks[0]["logprobs"], chunks[-1]["finish_reason"] = logprobs, reason
        return chunks

    @staticmethod
    def _transcript(delta: dict[str, Any]) -> dict[str, Any]:
        if "content" not in delta:
            return delta
        rest = {k: v for k, v in delta.items() if k != "content"}
        return {**rest, "audio": {"transcript": delta["content"]}}

    def _identified(self, delta: dict[str, Any]) -> dict[str, Any]:
        if "audio" not in delta:
            return delta
        audio = {"id": self._id, **delta["audio"]}
        if not self._started:
            audio.setdefault("expires_at", self._expires_at)
            self._started = True
        return {**delta, "audio": audio}
