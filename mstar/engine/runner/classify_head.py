"""The served model's classifier head: what a ``classify`` pooling request's last hidden state
(after the final norm) goes through, giving the logits of the model's labels.

Two kinds of model have one (docs/openai_api.rst, "Rerank, score and classify"):

- a sequence-classification checkpoint (``*ForSequenceClassification``: a ``score`` linear layer
  in place of the LM head; ``mstar.models.families.sequence_classification``), whose labels are
  its ``id2label``;
- a causal LM that judges with two tokens' logits (Qwen3-Reranker: "no", "yes"), named by
  MSTAR_SCORE_TOKENS: the head is the LM head's two rows, so the labels are those tokens and
  softmax over them is the probability of the second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mstar.models.loading.registry import classifies

ClassifierHead = Callable[[torch.Tensor], torch.Tensor]  # hidden [n, hidden] -> logits [n, labels]


def score_token_texts(setting: str | None) -> list[str]:
    """MSTAR_SCORE_TOKENS as its two token texts (empty when unset)."""
    return [t.strip() for t in (setting or "").split(",") if t.strip()]


def token_id(tokenizer: Any, text: str) -> int:
    """The one token ``text`` is (a ValueError when it is none or several)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"MSTAR_SCORE_TOKENS: {text!r} is {len(ids)} tokens of this tokenizer "
                         f"({ids[:4]}), not one")
    return ids[0]


def classifier_head(model: Any, model_dir: Path, hf_config: Any,
                    score_tokens: str | None) -> ClassifierHead | None:
    """The head of the model loaded from ``model_dir``, or None when it has none."""
    if classifies(getattr(hf_config, "architectures", None)):
        return model.classify
    texts = score_token_texts(score_tokens)
    if not texts:
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = torch.tensor([token_id(tokenizer, t) for t in texts])

    def token_logits(hidden: torch.Tensor) -> torch.Tensor:
        return model.compute_logits(hidden)[:, ids.to(hidden.device)]

    return token_logits
