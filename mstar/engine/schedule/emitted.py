"""What a step's output gives each request, as the scheduler applies it (``Scheduler.update``).

The scheduler appends each sampled token and asks the engine's stop rule after every one, so a
request that a token ends (a stop token, EOS, max_tokens, a pooling request's prompt) is
finished there, by the scheduler, and its later tokens of the step (accepted drafts) are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mstar.engine.request.outputs import TokenLogprob
from mstar.engine.request.sequence import Sequence

StopRule = Callable[[Sequence, int], "str | None"]  # (request, token just appended) -> finish reason


@dataclass(slots=True)
class Emitted:
    """A request's tokens of one step (several when it verified drafts), their logprobs when
    asked for, and its finish reason when one of them ended it (then the scheduler has finished
    it)."""

    seq: Sequence
    token_ids: list[int]
    logprobs: list[TokenLogprob | None] | None
    finish_reason: str | None
