"""Turns the last-position logits of each sampled sequence into next tokens."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.outputs import TokenLogprob
from mstar.engine.sampling_params import SamplingParams


@dataclass
class SamplingMetadata:
    """Per-row sampling inputs, in the order of the logits rows."""

    params: list[SamplingParams]
    generators: list[torch.Generator | None]
    token_ids: list[list[int]]  # prompt + output so far, for repetition_penalty
    all_greedy: bool
    any_penalty: bool
    any_logprobs: bool


class Sampler:
    def __call__(
        self, logits: torch.Tensor, meta: SamplingMetadata
    ) -> tuple[torch.Tensor, list[TokenLogprob | None] | None]:
        logits = logits.float()
        raw = logits
        if meta.any_penalty:
            logits = self._apply_repetition_penalty(logits, meta)
        tokens = logits.argmax(dim=-1) if meta.all_greedy else self._sample(logits, meta)
        logprobs = self._logprobs(raw, tokens, meta) if meta.any_logprobs else None
        return tokens, logprobs

    @staticmethod
    def _apply_repetition_penalty(logits: torch.Tensor, meta: SamplingMetadata) -> torch.Tensor:
        logits = logits.clone()
        for row, (p, ids) in enumerate(zip(meta.params, meta.token_ids, strict=True)):
            if p.repetition_penalty == 1.0 or not ids:
                continue
            idx = torch.tensor(sorted(set(ids)), device=logits.device)
            seen = logits[row, idx]
            penalty = p.repetition_penalty
            logits[row, idx] = torch.where(seen > 0, seen / penalty, seen * penalty)
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
        """Taken from the raw logits: before repetition penalty and temperature."""
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
