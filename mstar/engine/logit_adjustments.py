"""Per-request changes to the logits before sampling: penalties, logit_bias, min_tokens.

Each function takes the rows' params and sampling states (``mstar.engine.sampling_state``; the
output so far comes from the state, never from the sequence) and works on ``logits`` in place,
batched over the rows that ask for it.
"""

from __future__ import annotations

import torch

from mstar.engine.sampling_params import SamplingParams
from mstar.engine.sampling_state import SamplingState


def adjusts_logits(p: SamplingParams) -> bool:
    """Whether any function here changes this request's logits."""
    return (p.repetition_penalty != 1.0 or p.presence_penalty != 0.0
            or p.frequency_penalty != 0.0 or bool(p.logit_bias) or p.min_tokens > 0)


def apply_penalties(logits: torch.Tensor, params: list[SamplingParams],
                    states: list[SamplingState | None]) -> None:
    """repetition_penalty over prompt + output (as transformers: a seen token's logit is divided
    by the penalty if positive, multiplied if not), then OpenAI's presence/frequency penalties over
    the output: ``logit -= presence * (count > 0) + frequency * count``."""
    rows = [i for i, p in enumerate(params) if p.repetition_penalty != 1.0
            or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0]
    if not rows:
        return
    device = logits.device
    counts = torch.zeros(len(rows), logits.shape[1], dtype=logits.dtype)
    for k, i in enumerate(rows):
        out = states[i].output_counts
        if out:
            counts[k, torch.tensor(list(out), dtype=torch.int64)] = torch.tensor(
                list(out.values()), dtype=logits.dtype)
    counts = counts.to(device, non_blocking=True)
    sub = logits[rows]
    rep = [(k, i) for k, i in enumerate(rows) if params[i].repetition_penalty != 1.0]
    if rep:
        seen = counts > 0
        for k, i in rep:
            seen[k, states[i].prompt_ids] = True
        penalty = _column([params[i].repetition_penalty for i in rows], sub)
        sub = torch.where(seen, torch.where(sub > 0, sub / penalty, sub * penalty), sub)
    presence = _column([params[i].presence_penalty for i in rows], sub)
    frequency = _column([params[i].frequency_penalty for i in rows], sub)
    logits[rows] = sub - presence * (counts > 0) - frequency * counts


def apply_logit_bias(logits: torch.Tensor, params: list[SamplingParams]) -> None:
    """Add each request's ``logit_bias[token]`` to that token's logit."""
    rows, ids, bias = [], [], []
    for i, p in enumerate(params):
        for token, value in p.logit_bias.items():
            rows.append(i)
            ids.append(token)
            bias.append(value)
    if rows:
        logits.index_put_((_index(rows, logits), _index(ids, logits)),
                          torch.tensor(bias, dtype=logits.dtype).to(logits.device),
                          accumulate=True)


def block_early_stop(logits: torch.Tensor, params: list[SamplingParams],
                     states: list[SamplingState | None]) -> None:
    """Mask EOS and stop_token_ids in rows with fewer than ``min_tokens`` outputs so far.

    A row left with no allowed token (a grammar that can only end) keeps its ending.
    """
    rows, cols, ids = [], [], []
    for i, p in enumerate(params):
        if p.min_tokens and states[i].num_sampled < p.min_tokens and states[i].early_stop_ids:
            cols += [len(rows)] * len(states[i].early_stop_ids)
            ids += states[i].early_stop_ids
            rows.append(i)
    if not rows:
        return
    sub = logits[rows]
    blocked = sub.index_put((_index(cols, logits), _index(ids, logits)),
                            torch.tensor(float("-inf"), device=logits.device))
    keeps_some = torch.isfinite(blocked).any(dim=-1, keepdim=True)
    logits[rows] = torch.where(keeps_some, blocked, sub)


def _column(values: list[float], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype).to(like.device).unsqueeze(1)


def _index(values: list[int], like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64).to(like.device)
