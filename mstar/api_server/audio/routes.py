"""POST /v1/audio/transcriptions and /v1/audio/translations: the upload decoded and bounded
(``media.audio_loader``), transcribed window by window (``windows``) and answered in the asked
format (``formats``), or streamed as OpenAI's ``transcript.text.delta`` events (token by token
when no timestamps are decoded; else one per segment as each 30 s window finishes) and a last
``transcript.text.done``.

Served by a speech model (``speech``); another model answers a 400 naming ``model``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from mstar.api_server.audio import formats
from mstar.api_server.audio.docs import TranscriptEvent, Transcription
from mstar.api_server.audio.form import AudioForm, transcription_form, translation_form
from mstar.api_server.audio.refusal import model_refusal
from mstar.api_server.audio.speech import SpeechModel
from mstar.api_server.audio.windows import Ask, Delta, transcribe
from mstar.api_server.generation.run import first_output, new_request_id
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError, error_body
from mstar.api_server.http.openapi import GENERATION_ERRORS, error_responses, sse_event_schema
from mstar.api_server.media.audio_loader import AudioLimits, AudioPart, load_clips

router = APIRouter()
FILE = "file"
ENGLISH_ONLY = "english"  # the language an English-only model reports
ENDPOINTS = {"transcribe": "transcriptions", "translate": "translations"}  # field-table rows
DOC = {200: {"model": Transcription, "description": "json and verbose_json: a JSON object; "
             "text, srt and vtt: text; stream=true: server-sent events.",
             "content": {"text/plain": {"schema": {"type": "string"}},
                         "text/event-stream": {"schema": sse_event_schema(TranscriptEvent)}}},
       **error_responses(GENERATION_ERRORS)}


@router.post("/v1/audio/transcriptions", response_model=None, responses=DOC)
async def transcriptions(request: Request,
                         form: Annotated[AudioForm, Depends(transcription_form)]) -> Any:
    return await _answer(request, form)


@router.post("/v1/audio/translations", response_model=None, responses=DOC)
async def translations(request: Request,
                       form: Annotated[AudioForm, Depends(translation_form)]) -> Any:
    return await _answer(request, form)


def _speech(request: Request, form: AudioForm) -> SpeechModel:
    request.app.state.gate.check_model(form.model)
    speech = request.app.state.speech
    if speech is None:
        name = request.app.state.model.name
        raise model_refusal(name, "transcribe audio (it is not a speech-to-text model)")
    return speech


def language_name(code: str | None) -> str:
    """OpenAI's name for the language of a verbose_json answer ("english")."""
    if code is None:
        return ENGLISH_ONLY
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return LANGUAGES.get(code.lower(), code)


def prompt_ids(tokenizer: Any, prompt: str | None, max_model_len: int) -> tuple[int, ...]:
    """The prompt text's ids, the last half of the decoder's length at most (transformers)."""
    if not prompt:
        return ()
    ids = tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)
    return tuple(ids[-(max_model_len // 2 - 1):])


async def _answer(request: Request, form: AudioForm) -> Any:
    sent = list((await request.form()).keys())  # parsed once already, for ``form``
    headers = request.app.state.gate.form_headers(sent, ENDPOINTS[form.task])
    speech = _speech(request, form)
    settings, generation = request.app.state.running.settings, request.app.state.generation
    limits = AudioLimits.from_settings(settings)
    data = await form.file.read(limits.max_bytes + 1)  # one byte past the bound says "too large"
    (clip,) = await load_clips([AudioPart(FILE, data)], limits, speech.rate,
                               settings.request_timeout_s)
    max_len = request.app.state.model.max_model_len
    ask = Ask(form.task, form.language, prompt_ids(generation.tokenizer, form.prompt, max_len),
              form.temperature, form.timed, form.response_format == "verbose_json")
    watch = None if form.stream else request.is_disconnected
    windows = transcribe(generation, speech, clip, ask, new_request_id("audio"), max_len, watch)
    duration = len(clip) / speech.rate
    if form.stream:
        first = await first_output(windows)  # an early failure keeps its status
        return StreamingResponse(_events(replay_one(first, windows), duration),
                                 media_type="text/event-stream", headers=headers)
    async with aclosing(windows):
        segments = [segment async for window in windows if isinstance(window, list)
                    for segment in window]
    answer = formats.response(formats.Transcript(form.task, language_name(form.language),
                                                 duration, segments, form.temperature),
                              form.response_format)
    answer.headers.update(headers)
    return answer


async def replay_one(first: Any, rest: AsyncIterator) -> AsyncIterator:
    """``first`` (awaited before the response started), then ``rest``."""
    yield first
    async with aclosing(rest):
        async for item in rest:
            yield item


async def _events(items: AsyncIterator[Delta | list[formats.Spoken]],
                  duration: float) -> AsyncIterator[bytes]:
    """A delta event per piece of text, then the done event; a failure midway is a last error
    event."""
    text = ""
    async with aclosing(items):
        try:
            async for item in items:
                if not isinstance(item, Delta):  # a window's segments: their text came as deltas
                    continue
                delta = item.text if text else item.text.lstrip()
                if delta:
                    text += delta
                    yield framing.sse({"type": "transcript.text.delta", "delta": delta})
        except APIError as exc:
            yield framing.sse(error_body(exc.status, exc.message, exc.param, exc.code, exc.kind))
            return
    yield framing.sse({"type": "transcript.text.done", "text": text.strip(),
                       "usage": formats.usage(duration)})
