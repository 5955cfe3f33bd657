"""What the engine hands out: typed structs that cross processes as they are (msgspec).

``array_like`` structs encode as msgpack arrays, without field names: the wire stays small on the
hottest message (one ``Outputs`` per step).
"""

from __future__ import annotations

import msgspec

from mstar.engine.request.sampling_params import SamplingParams


class TokenLogprob(msgspec.Struct, array_like=True):
    """Log-probability of one sampled token, with the ``top`` alternatives when asked for."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = []


class AudioChunk(msgspec.Struct, array_like=True):
    """Audio a codec node decoded for one request in one step (speech out): mono samples as
    little-endian float32 bytes, at ``rate`` samples a second."""

    samples: bytes
    rate: int


def audio_chunk(chunks: list, rate: int) -> AudioChunk:
    """A codec node's decoded chunks (float arrays, maybe none: an empty chunk still carries
    the rate to the client) as one ``AudioChunk``."""
    import numpy as np

    return AudioChunk(np.concatenate(chunks or [np.zeros(0)]).astype("<f4").tobytes(), rate)


class ThinkerRows(msgspec.Struct, array_like=True):
    """What Qwen3-Omni's talker reads of its thinker, for one request (``SamplingParams
    .thinker_rows``), as little-endian float32 rows of the thinker's ``width``: ``embeds``, the
    input embedding of each new token (one per ``new_token_ids``, in order); ``hidden``, the hidden
    state after the talker config's ``accept_hidden_layer`` layers at the prompt's media
    positions ``media_positions`` (sent once, with the request's first token)."""

    width: int
    embeds: bytes = b""
    media_positions: list[int] = []
    hidden: bytes = b""


class RequestOutput(msgspec.Struct, array_like=True):
    """What one request produced in one engine step (deltas, not totals): token ids only; the text
    is made above the engine (``mstar.output``)."""

    request_id: str
    new_token_ids: list[int] = []
    finished: bool = False
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    embedding: bytes | None = None  # a pooling request's vector: little-endian float32
    # Whisper: the no-speech probability (mstar.engine.runner.no_speech), with the first token
    no_speech_prob: float | None = None
    # Speech models: the frame of codes of each new token (its code 0 is the token)
    new_frames: list[list[int]] | None = None
    # Speech out: the audio those frames made ready (the worker's codec node,
    # mstar.worker.speech_out), None when no window was ready
    new_audio: AudioChunk | None = None
    # Qwen3-Omni's thinker, when the request asks (SamplingParams.thinker_rows)
    thinker_rows: ThinkerRows | None = None


def merged(first: RequestOutput, then: RequestOutput) -> RequestOutput:
    """Two consecutive outputs of one request in one step, as one (deltas joined)."""
    logprobs = None
    if first.logprobs is not None or then.logprobs is not None:
        logprobs = (first.logprobs or []) + (then.logprobs or [])
    frames = None
    if first.new_frames is not None or then.new_frames is not None:
        frames = (first.new_frames or []) + (then.new_frames or [])
    return msgspec.structs.replace(
        then, new_token_ids=first.new_token_ids + then.new_token_ids, logprobs=logprobs,
        new_frames=frames, thinker_rows=joined_rows(first.thinker_rows, then.thinker_rows))


def split_finish(out: RequestOutput) -> tuple[RequestOutput | None, RequestOutput]:
    """A request's finishing output as its text now and its finish later (a spoken reply's last
    text need not wait for its speech): the first part, not finished, holds every new token but
    the stop token the request ended on (None when there is no other); the second holds that
    stop token (if any), its logprob and the finish. Joined with ``merged`` they are ``out``."""
    held = 1 if out.finish_reason == "stop" and out.new_token_ids else 0
    cut = len(out.new_token_ids) - held
    if cut == 0:
        return None, out
    logprobs = out.logprobs
    now = msgspec.structs.replace(
        out, new_token_ids=out.new_token_ids[:cut], finished=False, finish_reason=None,
        num_output_tokens=out.num_output_tokens - held,
        logprobs=None if logprobs is None else logprobs[:cut])
    later = msgspec.structs.replace(
        out, new_token_ids=out.new_token_ids[cut:], new_frames=None, new_audio=None,
        thinker_rows=None, logprobs=None if logprobs is None else logprobs[cut:])
    return now, later


def joined_rows(first: ThinkerRows | None, then: ThinkerRows | None) -> ThinkerRows | None:
    """Two consecutive deltas of one request's thinker rows, as one."""
    if first is None or then is None:
        return then if first is None else first
    return ThinkerRows(then.width, first.embeds + then.embeds,
                       first.media_positions + then.media_positions, first.hidden + then.hidden)


def finish_reason(params: SamplingParams, token: int, num_output_tokens: int,
                  eos_token_ids: set[int]) -> str | None:
    """Why a request ends after emitting ``token`` as its ``num_output_tokens``-th: "stop" (a stop
    token, or EOS), "length" (max_tokens reached), or None (it goes on)."""
    # A constrained request ends where its grammar does: it allows EOS only once complete.
    ends_at_eos = not params.ignore_eos or params.structured_output is not None
    if token in params.stop_token_ids or (ends_at_eos and token in eos_token_ids):
        return "stop"
    if num_output_tokens >= params.max_tokens:
        return "length"
    return None
