"""OLMo 2: norms after attention and after the MLP (none before), and RMSNorm on the
whole q and k projections (across heads) before rope."""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.llama import MLP, Attention, LlamaForCausalLM
from mstar.models.layers.blocks import RMSNorm


class Olmo2Attention(Attention):
    def __init__(self, config) -> None:
        super().__init__(config, qkv_bias=False, o_bias=False, qk_norm=False)
        self.q_norm = RMSNorm(self.q_size, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.kv_size, config.rms_norm_eps)

    def forward(self, hidden, cos, sin, attn_metadata):
        q, k, v = self.qkv_proj(hidden).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.q_norm(q), self.k_norm(k)
        qk = torch.cat([q.view(-1, self.num_heads, self.head_dim),
                        k.view(-1, self.num_kv_heads, self.head_dim)], dim=1)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        return self.o_proj(self.attend(qk, v, cos, sin, attn_metadata))


class Olmo2DecoderLayer(nn.Module):
    """Keeps the Llama layer protocol: returns (output, residual) with the sum still pending."""

    def __init__(self, config, qkv_bias: bool, o_bias: bool, qk_norm: bool) -> None:
        super().__init__()
        self.self_attn = Olmo2Attention(config)
        self.mlp = MLP(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden, residual, cos, sin, attn_metadata):
        if residual is not None:
            hidden = hidden + residual
        attn = self.self_attn(hidden, cos, sin, attn_metadata)
        hidden = hidden + self.post_attention_layernorm(attn)
        return self.post_feedforward_layernorm(self.mlp(hidden)), hidden


class Olmo2ForCausalLM(LlamaForCausalLM):
    decoder_layer_cls = Olmo2DecoderLayer
