"""The quality gate's measures: perplexity over the project's docs and top-1 agreement with fp32.

Both come from one teacher-forced pass over the same tokens: the docs/*.rst files in name order,
concatenated and cut to a token budget, scored in independent windows (each a fresh prefill).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from mstar.engine.attention import AttentionInputs
from mstar.engine.runner.step_attention import on_device

DOCS = Path(__file__).resolve().parent.parent / "docs"


@dataclass
class TextScore:
    perplexity: float
    top1: torch.Tensor  # the model's most likely next token at every scored position


def docs_token_ids(tokenizer, max_tokens: int) -> list[int]:
    text = "\n\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.rst")))
    return tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens]


@torch.inference_mode()
def score_text(engine, token_ids: list[int], window: int) -> TextScore:
    """Perplexity of ``token_ids`` under the engine's model, in windows of ``window`` tokens.

    Uses KV-cache blocks from 0 up, so the engine must be idle and own window / block_size blocks.
    """
    runner = engine.model_runner
    nll, count, top1 = 0.0, 0, []
    for start in range(0, len(token_ids) - 1, window):
        chunk = token_ids[start : start + window + 1]
        inputs, targets = chunk[:-1], torch.tensor(chunk[1:])
        logits = _prefill_logits(runner, inputs)
        logp = torch.log_softmax(logits.float(), dim=-1)
        nll -= float(logp.gather(1, targets[:, None]).sum())
        count += len(targets)
        top1.append(logits.argmax(-1))
    return TextScore(math.exp(nll / count), torch.cat(top1))


def _prefill_logits(runner, ids: list[int]) -> torch.Tensor:
    n, bs, device = len(ids), runner.block_size, runner.device
    positions = list(range(n))
    inputs = AttentionInputs(
        slot_mapping=on_device(positions, device),
        block_tables=on_device([list(range(-(-n // bs)))], device),
        context_lens=on_device([n], device),
        query_lens=[n],
        context_lens_list=[n],
        num_decodes=0,
        block_size=bs,
        dtype=runner.dtype,
        seq_keys=[-1],
    )
    metadata = runner.attn_backend.build(inputs)
    metadata.begin_forward()
    hidden = runner.model(on_device(ids, device), on_device(positions, device), metadata)
    return runner.model.compute_logits(hidden)


def agreement(score: TextScore, reference: TextScore) -> float:
    """Fraction of positions where both models' greedy next token is the same."""
    return float((score.top1 == reference.top1).float().mean())
