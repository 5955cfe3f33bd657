"""Llama-style decoder (also the base of Qwen2 and Qwen3) running on the paged KV cache.

Sequences are flattened into one token dimension; the attention metadata knows
where each sequence starts and which cache blocks it owns.
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.layers import fused_ops
from mstar.models.layers.blocks import RMSNorm, RotaryEmbedding, SiluAndMul, apply_rope, rope_parameters
from mstar.models.layers.decode_stack import DecodeStack, StackLayer, decode_layers


def fused_shard_range(decoder: nn.Module, intermediate_size: int, packed: str,
                      shard: int) -> tuple[int, int]:
    """(offset, size) of checkpoint shard ``shard`` inside the output dim of a Llama-layout
    decoder's fused parameter: q, k, v in ``qkv_proj`` (sized by the first layer's attention),
    else gate, up. Only ``qkv_proj`` reads the layer: a hybrid model's first layer may have no
    attention (Qwen3.5's linear-attention layers), and its MLP shards are sized all the same."""
    if packed == "qkv_proj":
        attn = decoder.layers[0].self_attn
        sizes = [attn.q_size, attn.kv_size, attn.kv_size]
    else:
        sizes = [intermediate_size] * 2
    return sum(sizes[:shard]), sizes[shard]


class Attention(nn.Module):
    native_ops = False  # q/k norms and rope in place on the qkv output (mstar.models.layers.fused_ops)

    def __init__(self, config, qkv_bias: bool, o_bias: bool, qk_norm: bool) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=o_bias)
        self.qk_norm = qk_norm
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        # Per-layer variations a family sets after construction: a sliding window (tokens a
        # query sees, itself included), a score scale other than 1/sqrt(head_dim), no rope.
        self.sliding_window: int | None = None
        self.scale: float | None = None
        self.use_rope = True
        # This layer's slice of the engine's KV cache (layout owned by the attention backend),
        # set after allocation.
        self.kv_cache = torch.empty(0)

    def forward(self, hidden, cos, sin, attn_metadata) -> torch.Tensor:
        qkv = self.qkv_proj(hidden)
        qk, v = qkv.split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        qk = qk.view(-1, self.num_heads + self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
            if self.native_ops:
                self.q_norm.normalize_(q)
                self.k_norm.normalize_(k)
            else:
                qk = torch.cat([self.q_norm(q), self.k_norm(k)], dim=1)
        return self.o_proj(self.attend(qk, v, cos, sin, attn_metadata))

    def attend(self, qk, v, cos, sin, attn_metadata) -> torch.Tensor:
        """Rope (q and k heads share one call) and paged attention: [tokens, q_size]."""
        if self.use_rope and self.native_ops:
            fused_ops.rope_(qk, cos, sin)  # partial rotary too: the leading dims, in place
        elif self.use_rope:
            rotary_dim = cos.shape[-1]  # partial rotary: only the leading dims rotate
            if rotary_dim == self.head_dim:
                qk = apply_rope(qk, cos, sin)
            else:
                rot, rest = qk.split([rotary_dim, self.head_dim - rotary_dim], dim=-1)
                qk = torch.cat([apply_rope(rot, cos, sin), rest], dim=-1)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
        out = attn_metadata.attend(q, k, v, self.kv_cache, self.sliding_window, self.scale)
        return out.reshape(-1, self.q_size)


class MLP(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        if config.hidden_act != "silu":
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r} (only 'silu')")
        bias = getattr(config, "mlp_bias", False)
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    native_ops = False  # decode-only steps: the whole layer in one native call, where it can

    def __init__(self, config, qkv_bias: bool, o_bias: bool, qk_norm: bool) -> None:
        super().__init__()
        self.self_attn = Attention(config, qkv_bias, o_bias, qk_norm)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self._native_linears: fused_ops.LayerLinears | bool | None = None  # None: not looked yet

    def native_linears(self) -> fused_ops.LayerLinears | None:
        """The linears for ``fused_ops.decode_layer``; None unless this layer is the plain
        Llama layout (no biases, no q/k norm, rope) and every linear runs a native kernel."""
        if self._native_linears is None:
            attn, mlp = self.self_attn, self.mlp
            plain = (type(attn) is Attention and type(mlp) is MLP and not attn.qk_norm
                     and attn.use_rope and type(self.input_layernorm) is RMSNorm
                     and type(self.post_attention_layernorm) is RMSNorm)
            self._native_linears = plain and fused_ops.LayerLinears.of(
                [attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj])
            self._native_linears = self._native_linears or False
        return self._native_linears or None

    def forward(self, hidden, residual, cos, sin, attn_metadata):
        if self.native_ops and getattr(attn_metadata, "native_decode_only", False):
            linears = self.native_linears()
            if linears is not None and linears.run(hidden):
                return self.decode_native(hidden, residual, cos, sin, attn_metadata, linears)
        if residual is None:
            residual = hidden
            hidden = self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, cos, sin, attn_metadata)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual

    def decode_native(self, hidden, residual, cos, sin, attn_metadata, linears):
        """forward's steps for decode rows, in one native call (the same kernels)."""
        normed = residual is None
        if normed:
            residual, hidden = hidden, self.input_layernorm(hidden)
        attn, meta = self.self_attn, attn_metadata
        out = fused_ops.decode_layer(
            hidden, residual, normed, self.input_layernorm, self.post_attention_layernorm, linears,
            cos, sin, attn.kv_cache, meta.slot_mapping, meta.decode_tables, meta.decode_lens,
            attn.sliding_window, attn.scale, attn.num_heads, attn.num_kv_heads)
        return out, residual


class LlamaModel(nn.Module):
    native_ops = False  # decode-only steps: every layer in one native call, where they can

    def __init__(self, config, qkv_bias: bool, o_bias: bool, qk_norm: bool,
                 layer_cls: type = DecoderLayer) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            layer_cls(config, qkv_bias, o_bias, qk_norm) for _ in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        head_dim = self.layers[0].self_attn.head_dim
        self.rotary_emb = RotaryEmbedding(
            head_dim, config.max_position_embeddings, rope_parameters(config)
        )
        self._decode_stack: DecodeStack | bool | None = None  # None: not looked yet; False: none

    def decode_stack(self, hidden: torch.Tensor, attn_metadata) -> DecodeStack | None:
        """The layers for ``decode_layers`` (one native call for the whole stack) when this step
        runs every layer's one-call path (``DecoderLayer.forward``) and the final norm is fused;
        else None."""
        layers = self.layers
        if not (self.native_ops and getattr(attn_metadata, "native_decode_only", False)
                and self.norm.native_ops and type(self.norm) is RMSNorm
                and all(isinstance(layer, DecoderLayer) and layer.native_ops for layer in layers)):
            return None
        stack = self._decode_stack
        if stack is None or (stack and not stack.current()):
            stack = self._decode_stack = self._gather_stack() or False
        return stack if stack and stack.run(hidden) else None

    def _gather_stack(self) -> DecodeStack | None:
        parts = [StackLayer(layer.input_layernorm, layer.post_attention_layernorm,
                            layer.native_linears(), layer.self_attn) for layer in self.layers
                 if type(layer).forward is DecoderLayer.forward]
        if len(parts) < len(self.layers) or any(p.linears is None for p in parts):
            return None
        return DecodeStack.of(parts, self.norm)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)

    def forward(self, input_ids, positions, attn_metadata, inputs_embeds=None) -> torch.Tensor:
        """``inputs_embeds`` (e.g. text and image embeddings merged) replaces the token lookup."""
        hidden = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        cos, sin = self.rotary_emb(positions)
        stack = self.decode_stack(hidden, attn_metadata)
        if stack is not None:
            return decode_layers(stack, hidden, cos, sin, attn_metadata)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, cos, sin, attn_metadata)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class LlamaForCausalLM(nn.Module):
    """Llama family: optional ``attention_bias`` on q/k/v/o, no q/k norm."""

    # checkpoint shard name -> (fused parameter, shard index)
    packed_modules = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
        "gate_proj": ("gate_up_proj", 0),
        "up_proj": ("gate_up_proj", 1),
    }

    # Checkpoint tensors the model does not run (e.g. a multi-token-prediction head).
    unused_checkpoint_prefixes: tuple[str, ...] = ()
    # The decoder layer class (a family with another norm placement swaps it).
    decoder_layer_cls: type = DecoderLayer

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.model = self.build_model(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def build_model(self, config) -> nn.Module:
        """The decoder stack (a family with another stack overrides this)."""
        qkv_bias, o_bias, qk_norm = self.attention_options(config)
        return LlamaModel(config, qkv_bias, o_bias, qk_norm, self.decoder_layer_cls)

    @staticmethod
    def attention_options(config) -> tuple[bool, bool, bool]:
        bias = bool(getattr(config, "attention_bias", False))
        return bias, bias, False

    def shard_range(self, packed: str, shard: int) -> tuple[int, int]:
        """(offset, size) of a checkpoint shard inside a fused parameter's output dim."""
        return fused_shard_range(self.model, self.config.intermediate_size,
                                 packed, shard)

    def forward(self, input_ids, positions, attn_metadata) -> torch.Tensor:
        return self.model(input_ids, positions, attn_metadata)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
