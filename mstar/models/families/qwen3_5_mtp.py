"""Qwen3.5's multi-token-prediction (MTP) head: the ``mtp.*`` tensors its checkpoints ship.

Transformers has no such module (it drops ``mtp.*`` on load), so this follows the published
architecture. From the main model's final (normed) hidden state ``h_t`` at position ``t``, which
predicts token ``t + 1``, and the embedding of that token ``x_{t+1}``, it predicts token ``t + 2``::

    u = fc(cat(pre_fc_norm_embedding(embed(x_{t+1})), pre_fc_norm_hidden(h_t)))   # 2h -> h
    u = a full-attention Qwen3.5 decoder layer at position t (with its own K/V)
    logits = lm_head(norm(u))                                 # the main model's lm_head

Its norms are (1 + weight) RMSNorms; the embeddings and ``lm_head`` are the main model's.
``load_mtp_head`` reads the head from a checkpoint beside the main model (which skips ``mtp.*``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from mstar.models.families.qwen3_5 import Qwen3_5DecoderLayer
from mstar.models.layers.offset_rmsnorm import OffsetRMSNorm
from mstar.models.loading.loader import _copy, checkpoint_files

PREFIX = "mtp."


class Qwen3_5MTP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.fc = nn.Linear(2 * hidden, hidden, bias=False)
        self.pre_fc_norm_embedding = OffsetRMSNorm(hidden, eps)
        self.pre_fc_norm_hidden = OffsetRMSNorm(hidden, eps)
        self.layers = nn.ModuleList(Qwen3_5DecoderLayer(config, "full_attention")
                                    for _ in range(num_mtp_layers(config)))
        self.norm = OffsetRMSNorm(hidden, eps)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, attn_metadata, step: int = 0) -> torch.Tensor:
        """The head's normed hidden state (``lm_head`` of it gives the logits): ``embeds`` of
        the next tokens, ``hidden`` the main model's states before them, rope of ``t``."""
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(embeds),
                               self.pre_fc_norm_hidden(hidden)], dim=-1))
        u = self.layers[step % len(self.layers)](u, cos, sin, attn_metadata)
        return self.norm(u)


def num_mtp_layers(config) -> int:
    return int(getattr(config.get_text_config(), "mtp_num_hidden_layers", 0) or 0)


def has_mtp_weights(model_dir: Path) -> bool:
    """Whether the checkpoint ships the head's tensors (its config may name layers it lacks)."""
    for path in checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt") as handle:
            if any(name.startswith(PREFIX + "fc.") for name in handle.keys()):  # noqa: SIM118
                return True
    return False


def load_mtp_head(model, model_dir: Path) -> Qwen3_5MTP:
    """The head of ``model`` (a loaded Qwen3.5) from its checkpoint, on the model's device and
    dtype. Fused projections (q/k/v, gate/up) are filled from their shards as for the model."""
    config = model.config
    if not num_mtp_layers(config):
        raise ValueError("the model's config names no MTP layers (mtp_num_hidden_layers)")
    ref = model.model.embed_tokens.weight
    head = Qwen3_5MTP(config).to(device=ref.device, dtype=ref.dtype)
    params = {PREFIX + name: p for name, p in head.named_parameters()}
    found = set()
    for path in checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (not iterable)
                if name.startswith(PREFIX):
                    _copy(model, params, name, handle.get_tensor(name))
                    found.add(name)
    if not found:
        raise ValueError(f"checkpoint in {model_dir} has no MTP weights ({PREFIX}*)")
    return head.eval()
