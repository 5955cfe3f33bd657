"""Per-request changes to the logits before sampling, as batched tensor ops on a step's rows:
penalties (from the batch's token counts), logit_bias (one scatter-add) and min_tokens (a mask).

Each works in place on ``logits``, the step's rows in ``StepRows`` order.
"""

from __future__ import annotations

import torch

from mstar.engine.sampling.batch import SamplingBatch, StepRows


def apply_penalties(logits: torch.Tensor, batch: SamplingBatch, rows: StepRows,
                    extra_counts: torch.Tensor | None = None) -> None:
    """repetition_penalty over prompt + output (as transformers: a seen token's logit is divided
    by the penalty if positive, multiplied if not), then OpenAI's presence/frequency penalties over
    the output: ``logit -= presence * (count > 0) + frequency * count``. ``extra_counts``
    ([penalised rows, vocab]): tokens each penalised row counts as output beyond the batch's
    counts (the draft tokens before a verified position)."""
    if not rows.penalised:
        return
    every = len(rows.penalised) == len(rows.slots)
    where = None if every else torch.tensor(rows.penalised, device=logits.device)
    slots = rows.index if every else rows.index[where]
    sub = logits if every else logits[where]
    counts = batch.output_counts[slots].to(sub.dtype)
    if extra_counts is not None:
        counts = counts + extra_counts
    seen = counts > 0
    if rows.repetition_rows:
        penalty = batch.repetition_penalty[slots].unsqueeze(1)
        repeated = seen | batch.prompt_mask[slots] if batch.prompt_mask is not None else seen
        sub = torch.where(repeated, torch.where(sub > 0, sub / penalty, sub * penalty), sub)
    sub = (sub - batch.presence_penalty[slots].unsqueeze(1) * seen
           - batch.frequency_penalty[slots].unsqueeze(1) * counts)
    if every:
        logits.copy_(sub)
    else:
        logits[where] = sub


def apply_logit_bias(logits: torch.Tensor, rows: StepRows) -> None:
    """Add each request's ``logit_bias[token]`` to that token's logit: one scatter-add."""
    if rows.bias is not None:
        index, values = rows.bias
        logits.view(-1).index_add_(0, index, values.to(logits.dtype))


def block_early_stop(logits: torch.Tensor, pending: list[tuple[int, torch.Tensor]]) -> None:
    """Mask EOS and stop_token_ids in the ``pending`` rows (row, early-stop ids): those with fewer
    than ``min_tokens`` outputs so far. A row left with no allowed token (a grammar that can only
    end) keeps its ending. One scatter and one max over the rows: no copy of the logits."""
    if not pending:
        return
    rows = torch.cat([torch.full_like(ids, i) for i, ids in pending])
    ids = torch.cat([ids for _, ids in pending])
    kept = logits[rows, ids]
    logits.index_put_((rows, ids), torch.tensor(float("-inf"), dtype=logits.dtype,
                                                device=logits.device))
    emptied = torch.isneginf(logits.amax(dim=-1))[rows]  # per masked id: nothing left in its row
    if emptied.any():
        logits.index_put_((rows[emptied], ids[emptied]), kept[emptied])
