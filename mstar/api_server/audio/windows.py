"""A clip transcribed as transformers' Whisper ``generate`` does it: in sequential 30 s windows,
each one engine request (the window's features, its decoder prompt), the next window starting
where the last complete segment of this one ended (``mstar.prompt.transcription``, shared with
``mstar.LLM``). Timestamps are decoded when the response is timed (srt, vtt, verbose_json) and
whenever the audio is longer than one window (long-form needs them to know where to go on).
The prompt text conditions the first window only (transformers' "first-segment").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import numpy as np

from mstar.api_server.audio.formats import Spoken
from mstar.api_server.audio.speech import SpeechModel
from mstar.api_server.generation.choice import Choice
from mstar.api_server.generation.facade import Generation
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.pool import in_media_pool
from mstar.engine.request.sampling_params import SamplingParams
from mstar.prompt import transcription as tr
from mstar.prompt.value import Prompt

FIELDS = {"language": "language", "task": "model", "prompt": "prompt"}  # whose fault, by name


@dataclass(frozen=True)
class Ask:
    """What the request asks of every window."""

    task: str
    language: str | None
    prompt_ids: tuple[int, ...]
    temperature: float
    timed: bool  # timestamps asked for by the response format
    logprobs: bool  # per-token logprobs wanted (verbose_json's avg_logprob)


def window_prompt(speech: SpeechModel, ask: Ask, timestamps: bool, first: bool) -> list[int]:
    try:
        return tr.decoder_prompt(speech.tokens, ask.language, ask.task, timestamps,
                                 ask.prompt_ids if first else ())
    except tr.TranscriptionError as exc:
        field = FIELDS.get(exc.field, exc.field)
        raise APIError(400, f"`{field}`: {exc}", field) from exc


def window_params(ask: Ask, prompt_len: int, max_model_len: int) -> SamplingParams:
    if prompt_len >= max_model_len:
        raise APIError(400, f"`prompt`: the decoder prompt takes {prompt_len} tokens; the model "
                       f"decodes at most {max_model_len}", "prompt")
    return SamplingParams(max_tokens=max_model_len - prompt_len, temperature=ask.temperature,
                          logprobs=0 if ask.logprobs else None)


def spoken(tokenizer: Any, speech: SpeechModel, segments: list[tr.Segment], seek: int,
           choice: Choice) -> list[Spoken]:
    """The segments that hold text, decoded (a window of silence holds none), each with its
    window's average logprob and no-speech probability (0.0 where the engine gave none)."""
    logprobs = [p.logprob for p in choice.logprobs]
    avg = tr.avg_logprob(logprobs) if logprobs else 0.0
    no_speech = choice.no_speech_prob or 0.0
    texts = [tr.text_ids(speech.tokens, s.token_ids) for s in segments]
    return [Spoken(s.start, s.end, tokenizer.decode(ids), s.token_ids, seek, avg, no_speech)
            for s, ids in zip(segments, texts, strict=True) if ids]


@dataclass(frozen=True)
class Delta:
    """Text the transcript grew by (for ``stream=true``)."""

    text: str


class LiveText:
    """An untimed window's text as its tokens arrive: every token is text there, and no later
    cut takes any back, so it can be shown at once (a piece ending inside a character waits)."""

    def __init__(self, tokenizer: Any, tokens: tr.WhisperTokens) -> None:
        self.tokenizer, self.tokens, self.shown = tokenizer, tokens, ""

    def grow(self, token_ids: list[int]) -> str:
        text = self.tokenizer.decode(tr.text_ids(self.tokens, tuple(token_ids)))
        if text.endswith("\ufffd") or len(text) <= len(self.shown):
            return ""
        delta, self.shown = text[len(self.shown):], text
        return delta


async def transcribe(generation: Generation, speech: SpeechModel, clip: np.ndarray, ask: Ask,
                     request_id: str, max_model_len: int,
                     is_disconnected: Callable[[], Awaitable[bool]] | None = None
                     ) -> AsyncIterator[Delta | list[Spoken]]:
    """The transcript as it grows (``Delta``: token by token in an untimed window, else each kept
    segment's text once its window is done), and after each window its kept segments, decoded.
    Audio of at most 30 s is one window (transformers' short form); longer audio goes on from
    where each window's segments end (long form). ``is_disconnected``: a non-streaming client's
    check, so that a client gone stops its windows (a stream's are stopped by closing this)."""
    features, total = await in_media_pool(speech.features, clip)
    long_form = total > tr.WINDOW_FRAMES
    timestamps = ask.timed or long_form
    seek, k = 0, 0
    while seek < total and (long_form or k == 0):
        frames = tr.window_frames(seek, total)
        window = await in_media_pool(speech.window, features, seek, frames)
        ids = window_prompt(speech, ask, timestamps, k == 0)
        job = (Prompt(ids, (window,)), window_params(ask, len(ids), max_model_len))
        choice = Choice()
        live = None if timestamps else LiveText(generation.tokenizer, speech.tokens)
        async with aclosing(generation.run(f"{request_id}-w{k}", [job], is_disconnected)) as outputs:
            async for _, out in outputs:
                choice.add(out)
                delta = live.grow(choice.token_ids) if live is not None else ""
                if delta:
                    yield Delta(delta)
        segments, advance = tr.split_segments(speech.tokens, choice.token_ids, seek, frames)
        kept = spoken(generation.tokenizer, speech, segments, seek, choice)
        for text in [s.text for s in kept] if live is None else []:
            yield Delta(text)
        yield kept
        seek += advance if advance > 0 else frames  # a window always moves on
        k += 1
