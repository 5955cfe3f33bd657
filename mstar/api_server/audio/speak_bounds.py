"""The speech route's bounds, one function each: the text a request may say
(MSTAR_MAX_SPEECH_INPUT_CHARS) and the frames it may make (MSTAR_MAX_SPEECH_SECONDS, in the
codec's frames, and max_model_len). The third speech bound, the codec's memory per request
(MSTAR_MAX_SPEECH_CODEC_BYTES), is fixed by the model and checked where the codec is made, when
a worker loads it (``mstar.worker.speech_out``)."""

from __future__ import annotations

from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import check_request_fits
from mstar.models.speech.utterance import frames_in


def check_speech_input(text: str, settings: Any) -> None:
    """A 400 naming ``input`` when ``text`` is longer than MSTAR_MAX_SPEECH_INPUT_CHARS."""
    if len(text) > settings.max_speech_input_chars:
        raise APIError(400, f"`input` has {len(text)} characters; at most "
                       f"{settings.max_speech_input_chars} are spoken per request "
                       "(MSTAR_MAX_SPEECH_INPUT_CHARS)", "input")


def speech_frames(asked: int | None, prompt_tokens: int, max_len: int, settings: Any) -> int:
    """The most frames a request makes. Given (``max_frames``), it must be within
    MSTAR_MAX_SPEECH_SECONDS' frames (a 400 naming ``max_frames``) and fit max_model_len after
    the prompt; unset, it is that bound, cut to what max_model_len leaves (a prompt that leaves
    no room is a 400 naming ``input``)."""
    bound = frames_in(settings.max_speech_seconds)
    if asked is not None and asked > bound:
        raise APIError(400, f"`max_frames`: {asked} frames are more than "
                       f"{settings.max_speech_seconds:g} s of audio, {bound} frames "
                       "(MSTAR_MAX_SPEECH_SECONDS)", "max_frames")
    frames = max(1, min(bound, max_len - prompt_tokens)) if asked is None else asked
    try:
        check_request_fits(prompt_tokens, frames, max_len, "input", "max_frames")
    except RequestRejected as exc:
        raise APIError(400, str(exc), exc.param) from exc
    return frames
