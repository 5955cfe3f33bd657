"""Sequence-classification heads on the decoder families (transformers'
``LlamaForSequenceClassification``, ``Qwen2ForSequenceClassification``,
``Qwen3ForSequenceClassification``): the family's decoder stack, and a ``score`` linear layer
(hidden size -> ``num_labels``, no bias) in place of the LM head. transformers applies it to the
last non-padding token's final hidden state (after the final norm); here that is the last prompt
token of a ``classify`` pooling request (``mstar.engine.runner.classify_head``).

Such a model generates nothing: ``compute_logits`` (what the runner samples the one dropped token
of a pooling request from) returns zeros, and the API refuses generation requests for it.
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.llama import LlamaForCausalLM
from mstar.models.families.qwen2 import Qwen2ForCausalLM
from mstar.models.families.qwen3 import Qwen3ForCausalLM


class SequenceClassifier:
    """Mixed in before a family's causal-LM class: its stack, with ``score`` as the head."""

    def __init__(self, config) -> None:
        nn.Module.__init__(self)  # the family's own __init__ would build a vocabulary-wide head
        self.config = config
        self.model = self.build_model(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.tie_word_embeddings = False  # no LM head to tie (the loader reads this)

    def classify(self, hidden: torch.Tensor) -> torch.Tensor:
        """The labels' logits of final hidden states [n, hidden] -> [n, num_labels]."""
        return self.score(hidden)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary-wide zeros: a classifier's sampled row is dropped (see the module doc)."""
        return hidden.new_zeros(hidden.shape[0], self.config.vocab_size)


class LlamaForSequenceClassification(SequenceClassifier, LlamaForCausalLM):
    pass


class Qwen2ForSequenceClassification(SequenceClassifier, Qwen2ForCausalLM):
    pass


class Qwen3ForSequenceClassification(SequenceClassifier, Qwen3ForCausalLM):
    pass
