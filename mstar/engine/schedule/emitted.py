"""What a step's output gives each request, as the scheduler applies it (``Scheduler.update``).

The scheduler appends each sampled token and asks the engine's stop rule after every one, so a
request that a token ends (a stop token, EOS, max_tokens, a pooling request's prompt) is
finished there, by the scheduler, and its later tokens of the step (accepted drafts) are dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mstar.engine.request.outputs import RequestOutput, TokenLogprob
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

    def output(self, pooled: dict[int, bytes]) -> RequestOutput:
        """What the request hands out for the step: its tokens, or a pooling request's vector
        (from ``pooled``, by seq_no) once its prompt has run."""
        seq = self.seq
        if seq.params.pooling is not None:  # its prompt ended: its vector, no tokens
            return RequestOutput(
                request_id=seq.request_id, finished=True, finish_reason="stop",
                num_prompt_tokens=seq.num_prompt_tokens, num_cached_tokens=seq.num_cached_tokens,
                embedding=pooled[seq.seq_no])
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=self.token_ids,
            finished=self.finish_reason is not None,
            finish_reason=self.finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            logprobs=self.logprobs,
            # with the request's first tokens only
            no_speech_prob=(seq.no_speech_prob if seq.num_output_tokens == len(self.token_ids)
                            else None),
        )
