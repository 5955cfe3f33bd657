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
        new_frames=frames)


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
