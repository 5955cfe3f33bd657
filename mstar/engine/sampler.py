"""Turns the last-position logits of each sampled sequence into next tokens.

In order, on the rows that ask for them: repetition_penalty (prompt + output), presence and
frequency penalties (output), logit_bias, the grammar mask (structured output), min_tokens (EOS
and stop_token_ids masked), then temperature / top_k / top_p / min_p, or argmax when greedy.
Logprobs are taken from the raw logits: before penalties, bias, the grammar mask and temperature.

What a row needs about its output so far comes from its ``SamplingState``, which the sampler alone
updates right after sampling (see ``mstar.engine.sampling_state`` for why, and the invariant).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.logit_adjustments import apply_logit_bias, apply_penalties, block_early_stop
from mstar.engine.outputs import TokenLogprob
from mstar.engine.sampling_params import SamplingParams
from mstar.engine.sampling_state import SamplingState
from mstar.engine.structured_output import apply_grammar_masks


@dataclass
class SamplingMetadata:
    """Per-row sampling inputs, in the order of the logits rows."""

    params: list[SamplingParams]
    generators: list[torch.Generator | None]
    states: list[SamplingState | None]  # None: the row reads nothing of its output so far
    all_greedy: bool
    any_adjustment: bool  # penalties, logit_bias or min_tokens
    any_logprobs: bool
    any_state: bool  # some row has a SamplingState: record the sampled tokens


class Sampler:
    """Stateless: a row's memory of its output lives in its SamplingState."""

    def __call__(
        self, logits: torch.Tensor, meta: SamplingMetadata
    ) -> tuple[torch.Tensor, list[TokenLogprob | None] | None]:
        raw = logits.float()
        logits = raw
        track = meta.any_state
        if meta.any_adjustment or track:
            logits = self._adjust(raw.clone(), meta)
        tokens = logits.argmax(dim=-1) if meta.all_greedy else self._sample(logits, meta)
        logprobs = self._logprobs(raw, tokens, meta) if meta.any_logprobs else None
        if track:
            for state, token in zip(meta.states, tokens.tolist(), strict=True):
                if state is not None:
                    state.record(token)
        return tokens, logprobs

    @staticmethod
    def _adjust(logits: torch.Tensor, meta: SamplingMetadata) -> torch.Tensor:
        """Penalties, bias, grammar mask, min_tokens: in place on a copy of the raw logits."""
        if meta.any_adjustment:
            apply_penalties(logits, meta.params, meta.states)
            apply_logit_bias(logits, meta.params)
        constrained = [i for i, s in enumerate(meta.states)
                       if s is not None and s.grammar is not None]
        if constrained:
            apply_grammar_masks(logits, constrained, [meta.states[i] for i in constrained])
        if meta.any_adjustment:
            block_early_stop(logits, meta.params, meta.states)
        return logits

    @staticmethod
    def _sample(logits: torch.Tensor, meta: SamplingMetadata) -> torch.Tensor:
        tokens = logits.argmax(dim=-1)
        for row, (p, gen) in enumerate(zip(meta.params, meta.generators, strict=True)):
            if p.greedy:
                continue
            x = logits[row] / p.temperature
            if p.top_k > 0 and p.top_k < x.numel():
                kth = torch.topk(x, p.top_k).values[-1]
                x = x.masked_fill(x < kth, float("-inf"))
            probs = torch.softmax(x, dim=-1)
            if p.top_p < 1.0:
                sorted_probs, order = probs.sort(descending=True)
                cum = sorted_probs.cumsum(0)
                # Keep the smallest prefix whose mass reaches top_p (always >= 1 token).
                drop = (cum - sorted_probs) >= p.top_p
                probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0.0))
            if p.min_p > 0.0:
                probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
            # Exponential race == categorical sampling, drawn from the request's own generator
            # so the result does not depend on what else is in the batch.
            noise = torch.empty_like(probs).exponential_(generator=gen)
            tokens[row] = (probs / noise).argmax()
        return tokens

    @staticmethod
    def _logprobs(raw: torch.Tensor, tokens: torch.Tensor,
                  meta: SamplingMetadata) -> list[TokenLogprob | None]:
        """Taken from the raw logits: before penalties, bias, the grammar mask and temperature."""
        logp = torch.log_softmax(raw, dim=-1)
        out: list[TokenLogprob | None] = []
        for row, p in enumerate(meta.params):
            if p.logprobs is None:
                out.append(None)
                continue
            tok = int(tokens[row])
            top = []
            if p.logprobs:
                vals, ids = logp[row].topk(p.logprobs)
                top = list(zip(ids.tolist(), vals.tolist(), strict=True))
            out.append(TokenLogprob(tok, float(logp[row, tok]), top))
        return out
