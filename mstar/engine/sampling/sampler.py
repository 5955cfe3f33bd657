"""Turns the last-position logits of each sampled row into next tokens, batched over the rows.

In order, on the rows that ask for them: repetition_penalty (prompt + output), presence and
frequency penalties (output), logit_bias, the grammar mask (structured output), min_tokens (EOS
and stop_token_ids masked), then temperature / top_k / top_p / min_p and a draw
(``mstar.engine.sampling.draw``), or argmax when greedy. Logprobs are taken from the raw logits:
before penalties, bias, the grammar mask and temperature.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from mstar.engine.request.outputs import TokenLogprob
from mstar.engine.sampling.adjustments import apply_logit_bias, apply_penalties, block_early_stop
from mstar.engine.sampling.batch import RowAdd, SamplingBatch, StepRows
from mstar.engine.sampling.draw import draw
from mstar.engine.sampling.grammar import GrammarMasks
from mstar.engine.speculative.draft_rows import DraftRows
from mstar.models.layers.fused_ops import greedy_tokens


@dataclass
class SamplingStep:
    """One step's sampling plan, a value made when the step is prepared: the batch's row changes
    (applied in step order, on the thread that samples) and the ordered slots of its sampled rows
    (row ``i`` of the logits is slot ``slots[i]``). ``drafts``: where each row sits in its
    request's run of draft tokens (speculative decoding), None when no row verifies drafts."""

    slots: list[int]
    removed: list[int] = field(default_factory=list)
    added: list[RowAdd] = field(default_factory=list)
    drafts: DraftRows | None = None


@dataclass
class StartedStep:
    rows: StepRows
    masks: Future | None  # the grammar bitmask being filled
    drafts: DraftRows | None = None


class Sampler:
    """Owns the ``SamplingBatch`` and the grammar thread; used by one thread at a time, in step
    order (the forward thread in the overlapped loop, the caller in the serial one)."""

    def __init__(self, batch: SamplingBatch) -> None:
        self.batch = batch
        self.grammar = GrammarMasks(batch.vocab_size)

    def begin(self, step: SamplingStep) -> StartedStep | None:
        """Before the forward: apply the row changes and start filling the grammar bitmask.
        None when the step samples nothing."""
        for slot in step.removed:
            self.batch.remove(slot)
        for row in step.added:
            self.batch.add(row.slot, row.params, row.prompt_token_ids, row.output_token_ids,
                           row.generator, row.state)
        if not step.slots:
            return None
        rows = self.batch.rows(step.slots)
        return StartedStep(rows, self.grammar.start(rows, step.drafts), step.drafts)

    def sample(self, logits: torch.Tensor, started: StartedStep
               ) -> tuple[torch.Tensor, list[TokenLogprob | None] | None]:
        """One token per row (and logprobs where asked); counts and grammars take the tokens
        (of a step verifying drafts: only the emitted ones)."""
        rows, drafts = started.rows, started.drafts
        raw = logits.float()
        wants_logprobs = any(n is not None for n in rows.logprobs)
        logits = raw
        if rows.any_adjustment or rows.constrained:  # in place, on a copy only if raw is needed
            logits = self._adjust(raw.clone() if wants_logprobs else raw, rows, started.masks,
                                  drafts)
        tokens = greedy_tokens(logits) if not rows.sampled else self._sample(logits, rows)
        logprobs = self._logprobs(raw, tokens, rows.logprobs) if wants_logprobs else None
        emitted = None if drafts is None else drafts.emitted(tokens.tolist())
        self.batch.record(rows, tokens, emitted)
        self.grammar.accept(rows, tokens, emitted)
        return tokens, logprobs

    def shutdown(self) -> None:
        self.grammar.shutdown()

    def _adjust(self, logits: torch.Tensor, rows: StepRows, masks: Future | None,
                drafts: DraftRows | None) -> torch.Tensor:
        """Penalties, bias, grammar mask, min_tokens: in place on a copy of the raw logits. A
        position after drafts counts them as output (penalties, min_tokens)."""
        extra = (drafts.counts(rows.penalised, logits.shape[-1], logits.device)
                 if drafts and rows.penalised else None)
        apply_penalties(logits, self.batch, rows, extra)
        apply_logit_bias(logits, rows)
        if masks is not None:
            self.grammar.apply(logits, rows, masks.result())
        block_early_stop(logits, self.batch.min_tokens_pending(
            rows, drafts.offsets if drafts else None))
        return logits

    def _sample(self, logits: torch.Tensor, rows: StepRows) -> torch.Tensor:
        """The sampled rows drawn (one batch draw of uniforms; a seeded row's own generator),
        the greedy ones argmax."""
        every = len(rows.sampled) == len(rows.slots)
        sampled = None if every else torch.tensor(rows.sampled, device=logits.device)
        uniforms = torch.rand(len(rows.sampled), generator=self.batch.generator,
                              device=logits.device)
        for k, generator in rows.seeded:
            uniforms[k] = torch.rand((), generator=generator, device=logits.device)
        scaled = (logits if every else logits[sampled]) * (1.0 / rows.temperature).unsqueeze(1)
        drawn = draw(scaled, rows.top_k, rows.top_p, rows.min_p, uniforms)
        if every:
            return drawn
        tokens = torch.empty(len(rows.slots), dtype=torch.int64, device=logits.device)
        greedy = torch.tensor(rows.greedy, device=logits.device)
        tokens[greedy] = greedy_tokens(logits[greedy])
        tokens[sampled] = drawn
        return tokens

    @staticmethod
    def _logprobs(raw: torch.Tensor, tokens: torch.Tensor,
                  wanted: list[int | None]) -> list[TokenLogprob | None]:
        """Taken from the raw logits: before penalties, bias, the grammar mask and temperature."""
        where = [i for i, n in enumerate(wanted) if n is not None]
        logp = torch.log_softmax(raw[where], dim=-1)
        chosen = logp.gather(1, tokens[where].unsqueeze(1)).squeeze(1).tolist()
        most = max(wanted[i] for i in where)
        top_values, top_ids = logp.topk(most) if most else (logp[:, :0], logp[:, :0].long())
        top_values, top_ids = top_values.tolist(), top_ids.tolist()
        out: list[TokenLogprob | None] = [None] * len(wanted)
        for k, i in enumerate(where):
            n = wanted[i]
            top = list(zip(top_ids[k][:n], top_values[k][:n], strict=True))
            out[i] = TokenLogprob(int(tokens[i]), chosen[k], top)
        return out
