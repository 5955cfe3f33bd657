"""POST /v1/audio/speech: text in, speech out, from a model whose walk graph emits audio: CSM, or
Qwen3-Omni, whose speech is a chat reply (``speak_reply``: ``input`` as a user turn through the
chat template, ``voice`` one of its talker's speakers; its worker's chain sends the audio the same
way, ``mstar.engine.chain``). One rule picks the prompt: ``ServedModel.speaks_replies``.

CSM's prompt is its turn (``utterance.csm_turn``) tokenized here under the speech bounds
(``speak_bounds``: MSTAR_MAX_SPEECH_INPUT_CHARS) and the prompt bounds of every route
(``given_prompts``: MSTAR_MAX_PROMPT_CHARS, max_model_len); it runs in a worker as a greedy
request of at most ``max_frames`` frames (``speak_bounds.speech_frames``). That worker's codec
node decodes the frames in the graph's windows and sends each ready window's samples with the
request's output (``RequestOutput.new_audio``, ``mstar.worker.speech_out``); this route only
joins and encodes them (``sound_formats``: wav and pcm framed here, flac, mp3 and opus through
libsndfile): no torch here. A model whose graph emits no audio answers a 400
naming ``model`` (``refusal``, the transcription routes' rule).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from mstar.api_server.audio.refusal import model_refusal
from mstar.api_server.audio.routes import replay_one
from mstar.api_server.audio.speak_bounds import check_speech_input, speech_frames
from mstar.api_server.audio.speak_protocol import SpeechRequest, check_speech_fields
from mstar.api_server.audio.speak_reply import check_reply_fields, reply_job
from mstar.api_server.generation.run import Job, first_output, new_request_id
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError, error_body
from mstar.api_server.http.openapi import GENERATION_ERRORS, error_responses
from mstar.api_server.media.sound_formats import FORMATS, StreamedSound, encode, pcm16
from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.speech.utterance import csm_turn
from mstar.output.processor import TextOutput

router = APIRouter()
CLIENT_GONE = 499  # answered to no one: the client closed the request (nginx's code)
BINARY = {"schema": {"type": "string", "format": "binary"}}
DOC = {200: {"description": "The audio, mono at the model's codec rate (CSM: 24 kHz; mp3 and "
             "opus at the lowest rate their codec takes above it): a WAV file, raw 16-bit "
             "little-endian PCM, FLAC, MP3 or Ogg Opus; stream_format audio (wav, pcm, opus): "
             "the same bytes as they decode (a streamed WAV's header, first, has sizes "
             "0xFFFFFFFF); stream_format sse: speech.audio.delta events (base64 pcm), then "
             "speech.audio.done.",
             "content": {**{fmt.media_type: BINARY for fmt in FORMATS.values()},
                         "text/event-stream": {"schema": {"type": "string"}}}},
       **error_responses(GENERATION_ERRORS)}


@router.post("/v1/audio/speech", response_model=None, responses=DOC)
async def speech(req: SpeechRequest, request: Request) -> Any:
    state = request.app.state
    headers = state.gate.admit_fields(req, "speech")  # its rejected fields too
    if "audio" not in state.model.outputs:  # from the model's walk graph (its emits)
        raise model_refusal(state.model.name, "speak (its graph emits no audio: it is not a "
                            "text-to-speech model)")
    check_speech_fields(req)
    job = await _job(state, req)
    outputs = state.generation.run(new_request_id("speech"), [job],
                                   None if req.stream_format else request.is_disconnected)
    if req.stream_format == "sse":
        first = await first_output(outputs)  # an early failure keeps its status
        return StreamingResponse(_events(first, outputs, job[0].num_tokens),
                                 media_type="text/event-stream", headers=headers)
    if req.stream_format == "audio":
        first = await first_output(outputs)
        return StreamingResponse(_audio_stream(first, outputs, req.response_format),
                                 media_type=FORMATS[req.response_format].media_type,
                                 headers=headers)
    pcm, rate = bytearray(), 0
    async with aclosing(outputs):
        async for _, out in outputs:
            pcm += _pcm(out)
            rate = out.new_audio.rate if out.new_audio is not None else rate
    if not rate:  # the client went away before the finish (a finished request carries a rate)
        return Response(status_code=CLIENT_GONE)
    body = await run_in_threadpool(encode, req.response_format, bytes(pcm), rate)  # LAME, Opus
    return Response(body, media_type=FORMATS[req.response_format].media_type, headers=headers)


async def _job(state: Any, req: SpeechRequest) -> Job:
    """The greedy request: the turn's ids, and its frames within the speech bounds; for a model
    whose speech is a chat reply (Qwen3-Omni), ``speak_reply.reply_job``'s."""
    settings = state.running.settings
    if state.model.speaks_replies:  # the one rule that picks the prompt
        check_reply_fields(req, state.model)
        check_speech_input(req.input, settings)
        return await reply_job(state, req)
    req.speaker()  # CSM: a speaker id
    check_speech_input(req.input, settings)
    (prompt,) = await state.generation.given_prompts([csm_turn(req.input, req.speaker())],
                                                     "input")
    frames = speech_frames(req.max_frames, prompt.num_tokens, state.model.max_model_len,
                           settings)
    return prompt, SamplingParams(max_tokens=frames, temperature=0.0)


def _pcm(out: TextOutput) -> bytes:
    return b"" if out.new_audio is None else pcm16(out.new_audio.samples)


async def _audio_stream(first: tuple[int, TextOutput], rest: AsyncIterator,
                        response_format: str) -> AsyncIterator[bytes]:
    """The bytes of each output's audio as it arrives, encoded (``StreamedSound``, made when the
    first audio brings the rate; a WAV's header comes first); a failure midway ends the stream
    short."""
    sound = None
    try:
        async for _, out in replay_one(first, rest):
            if out.new_audio is None:
                continue
            sound = sound or StreamedSound(response_format, out.new_audio.rate)
            if chunk := sound.push(_pcm(out)):
                yield chunk
        if sound is not None and (tail := sound.finish()):
            yield tail
    finally:
        if sound is not None:
            sound.close()


async def _events(first: tuple[int, TextOutput], rest: AsyncIterator,
                  prompt_tokens: int) -> AsyncIterator[bytes]:
    """OpenAI's speech events: ``speech.audio.delta`` (base64 pcm) as each chunk decodes, then
    ``speech.audio.done`` with the usage (output tokens: frames); a failure midway is a last
    error event."""
    frames = 0
    try:
        async for _, out in replay_one(first, rest):
            frames = out.num_output_tokens
            if chunk := _pcm(out):
                yield framing.sse({"type": "speech.audio.delta",
                                   "audio": base64.b64encode(chunk).decode("ascii")})
    except APIError as exc:
        yield framing.sse(error_body(exc.status, exc.message, exc.param, exc.code, exc.kind))
        return
    yield framing.sse({"type": "speech.audio.done", "usage": {
        "input_tokens": prompt_tokens, "output_tokens": frames,
        "total_tokens": prompt_tokens + frames}})

