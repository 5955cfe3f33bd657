"""Qwen3.5 (text): Gated DeltaNet layers interleaved with gated full attention (three to one
by default), (1 + weight) RMSNorms, partial rotary. Full-attention layers use the paged KV
cache; DeltaNet layers keep a fixed-size state per sequence (see gated_deltanet)."""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.llama import MLP, Attention, LlamaForCausalLM
from mstar.models.layers.blocks import RotaryEmbedding, rope_parameters
from mstar.models.layers.gated_deltanet import GatedDeltaNet
from mstar.models.layers.offset_rmsnorm import OffsetRMSNorm

_LAYER_TYPES = ("linear_attention", "full_attention")


class GatedAttention(Attention):
    """q_proj also yields a per-channel output gate: out = o_proj(attn * sigmoid(gate))."""

    def __init__(self, config) -> None:
        bias = bool(getattr(config, "attention_bias", False))
        super().__init__(config, qkv_bias=bias, o_bias=bias, qk_norm=True)
        self.qkv_proj = nn.Linear(config.hidden_size, 2 * self.q_size + 2 * self.kv_size,
                                  bias=bias)
        self.q_norm = OffsetRMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = OffsetRMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(self, hidden, cos, sin, attn_metadata) -> torch.Tensor:
        q_gate, k, v = self.qkv_proj(hidden).split(
            [2 * self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, gate = q_gate.view(-1, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        qk = torch.cat([self.q_norm(q), self.k_norm(k.view(-1, self.num_kv_heads, self.head_dim))],
                       dim=1)
        out = self.attend(qk, v.view(-1, self.num_kv_heads, self.head_dim), cos, sin,
                          attn_metadata)
        return self.o_proj(out * torch.sigmoid(gate.reshape(-1, self.q_size)))


class Qwen3_5DecoderLayer(nn.Module):
    def __init__(self, config, layer_type: str) -> None:
        super().__init__()
        if layer_type not in _LAYER_TYPES:
            raise ValueError(f"unsupported layer_types entry {layer_type!r}; supported: "
                             f"{', '.join(_LAYER_TYPES)}")
        if layer_type == "linear_attention":
            self.linear_attn = GatedDeltaNet(config)
        else:
            self.self_attn = GatedAttention(config)
        self.mlp = MLP(config)
        self.input_layernorm = OffsetRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = OffsetRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden, cos, sin, attn_metadata) -> torch.Tensor:
        x = self.input_layernorm(hidden)
        if hasattr(self, "linear_attn"):
            hidden = hidden + self.linear_attn(x, attn_metadata)
        else:
            hidden = hidden + self.self_attn(x, cos, sin, attn_metadata)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Qwen3_5Model(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Qwen3_5DecoderLayer(config, t) for t in config.layer_types)
        self.norm = OffsetRMSNorm(config.hidden_size, config.rms_norm_eps)
        rope = rope_parameters(config)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rotary_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
        self.rotary_emb = RotaryEmbedding(rotary_dim, config.max_position_embeddings, rope)

    def forward(self, input_ids, positions, attn_metadata) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(positions)
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, attn_metadata)
        return self.norm(hidden)


class Qwen3_5ForCausalLM(LlamaForCausalLM):
    unused_checkpoint_prefixes = ("mtp.",)  # the multi-token-prediction head (not served)

    def build_model(self, config) -> nn.Module:
        return Qwen3_5Model(config)

    def shard_range(self, packed: str, shard: int) -> tuple[int, int]:
        if packed != "qkv_proj":
            return super().shard_range(packed, shard)
        attn = next(layer.self_attn for layer in self.model.layers if hasattr(layer, "self_attn"))
        sizes = [2 * attn.q_size, attn.kv_size, attn.kv_size]  # q_proj carries the gate too
        return sum(sizes[:shard]), sizes[shard]
