"""Gemma 3 (text): interleaved sliding-window and global layers with their own rope, embeddings
scaled by sqrt(hidden), (1 + weight) RMSNorms around attention and MLP, q/k norms, a query
scale from ``query_pre_attn_scalar``, a GELU-tanh gated MLP and optional logit softcapping."""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.llama import Attention, LlamaForCausalLM
from mstar.models.layers import fused_ops
from mstar.models.layers.blocks import RotaryEmbedding
from mstar.models.layers.offset_rmsnorm import OffsetRMSNorm

_ACTIVATIONS = {"gelu_pytorch_tanh": "tanh", "gelu": "none"}


class GemmaMLP(nn.Module):
    native_ops = False  # GELU-tanh times up in one native call (mstar.models.layers.fused_ops)

    def __init__(self, config) -> None:
        super().__init__()
        act = config.hidden_activation
        if act not in _ACTIVATIONS:
            raise ValueError(f"unsupported hidden_activation {act!r}; supported: "
                             f"{', '.join(_ACTIVATIONS)}")
        self.approximate = _ACTIVATIONS[act]
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native_ops and self.approximate == "tanh":
            return self.down_proj(fused_ops.gelu_tanh_and_mul(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.gelu(gate, approximate=self.approximate) * up)


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config, layer_type: str) -> None:
        super().__init__()
        if getattr(config, "use_bidirectional_attention", False):
            raise ValueError("unsupported use_bidirectional_attention=True (an embedding model); "
                             "supported: False")
        bias = bool(getattr(config, "attention_bias", False))
        self.layer_type = layer_type
        attn = self.self_attn = Attention(config, bias, bias, qk_norm=True)
        attn.q_norm = OffsetRMSNorm(attn.head_dim, config.rms_norm_eps)
        attn.k_norm = OffsetRMSNorm(attn.head_dim, config.rms_norm_eps)
        attn.scale = config.query_pre_attn_scalar ** -0.5
        if layer_type == "sliding_attention":
            attn.sliding_window = config.sliding_window
        self.mlp = GemmaMLP(config)
        eps = config.rms_norm_eps
        self.input_layernorm = OffsetRMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = OffsetRMSNorm(config.hidden_size, eps)
        self.pre_feedforward_layernorm = OffsetRMSNorm(config.hidden_size, eps)
        self.post_feedforward_layernorm = OffsetRMSNorm(config.hidden_size, eps)

    def forward(self, hidden, cos, sin, attn_metadata) -> torch.Tensor:
        attn = self.self_attn(self.input_layernorm(hidden), cos, sin, attn_metadata)
        hidden = hidden + self.post_attention_layernorm(attn)
        mlp = self.mlp(self.pre_feedforward_layernorm(hidden))
        return hidden + self.post_feedforward_layernorm(mlp)


class RotaryByLayerType(nn.ModuleDict):
    """One rope table per layer type; ``forward`` returns {layer type: (cos, sin)}."""

    def init_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        for rope in self.values():
            rope.init_cache(device, dtype)

    def forward(self, positions: torch.Tensor) -> dict:
        return {name: rope(positions) for name, rope in self.items()}


class Gemma3Model(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_scale = config.hidden_size ** 0.5
        self.layers = nn.ModuleList(Gemma3DecoderLayer(config, t) for t in config.layer_types)
        self.norm = OffsetRMSNorm(config.hidden_size, config.rms_norm_eps)
        head_dim = self.layers[0].self_attn.head_dim
        self.rotary_emb = RotaryByLayerType({
            t: RotaryEmbedding(head_dim, config.max_position_embeddings, config.rope_parameters[t])
            for t in sorted(set(config.layer_types))
        })

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        # The scale is rounded to the activation dtype first, as transformers does.
        return hidden * torch.tensor(self.embed_scale, dtype=hidden.dtype)

    def forward(self, input_ids, positions, attn_metadata, inputs_embeds=None) -> torch.Tensor:
        hidden = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        rope = self.rotary_emb(positions)
        for layer in self.layers:
            hidden = layer(hidden, *rope[layer.layer_type], attn_metadata)
        return self.norm(hidden)


class Gemma3ForCausalLM(LlamaForCausalLM):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.softcap = getattr(config, "final_logit_softcapping", None)

    def build_model(self, config) -> nn.Module:
        return Gemma3Model(config)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits
