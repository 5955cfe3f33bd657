"""What the engine hands out: typed structs that cross processes as they are (msgspec).

``array_like`` structs encode as msgpack arrays, without field names: the wire stays small on the
hottest message (one ``Outputs`` per step).
"""

from __future__ import annotations

import msgspec


class TokenLogprob(msgspec.Struct, array_like=True):
    """Log-probability of one sampled token, with the ``top`` alternatives when asked for."""

    token_id: int
    logprob: float
    top: list[tuple[int, float]] = []


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
