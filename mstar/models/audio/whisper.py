"""Whisper (encoder-decoder): transformers' own encoder (a stateless node, run once per 30 s
window) and an mstar decoder whose self-attention runs on the paged KV cache.

The decoder's cross-attention keys and values come from the encoder's output, once per request:
``cross_states`` (the per-request slot, ``mstar.engine.runner.cross_states``) computes them at the
request's prefill and hands each step's rows theirs (``CrossBatch``). Checkpoint names are
transformers' (``model.encoder.*``, ``model.decoder.*``, ``proj_out``, tied to the embeddings).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.models.whisper.modeling_whisper import WhisperEncoder

AUDIO_ENCODER = "audio_encoder"


class SelfAttention(nn.Module):
    """Causal self-attention on the paged KV cache (k_proj has no bias, as in Whisper)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads = self.num_kv_heads = heads
        self.head_dim = dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        self.kv_cache = torch.empty(0)  # this layer's slice of the engine's KV cache
        self.sliding_window: int | None = None  # plain causal attention at the default scale
        self.scale: float | None = None

    def forward(self, hidden: torch.Tensor, attn_metadata) -> torch.Tensor:
        shape = (-1, self.num_heads, self.head_dim)
        q = self.q_proj(hidden).view(shape)
        k = self.k_proj(hidden).view(shape)
        v = self.v_proj(hidden).view(shape)
        out = attn_metadata.attend(q, k, v, self.kv_cache, self.sliding_window, self.scale)
        return self.out_proj(out.reshape(hidden.shape[0], -1))


class CrossAttention(nn.Module):
    """Attends to the request's kept encoder K/V; k/v projections run once, at prefill."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.num_heads = heads
        self.head_dim = dim // heads
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def keys_values(self, encoded: torch.Tensor) -> torch.Tensor:
        """[2, heads, frames, head_dim] from the encoder output [frames, dim]."""
        shape = (encoded.shape[0], self.num_heads, self.head_dim)
        k = self.k_proj(encoded).view(shape).transpose(0, 1)
        v = self.v_proj(encoded).view(shape).transpose(0, 1)
        return torch.stack([k, v])

    def forward(self, hidden: torch.Tensor, layer: int, cross) -> torch.Tensor:
        q = self.q_proj(hidden).view(-1, self.num_heads, self.head_dim)
        return self.out_proj(cross.attend(layer, q).reshape(hidden.shape[0], -1))


class DecoderLayer(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        dim, heads = config.d_model, config.decoder_attention_heads
        self.self_attn = SelfAttention(dim, heads)
        self.self_attn_layer_norm = nn.LayerNorm(dim)
        self.encoder_attn = CrossAttention(dim, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, config.decoder_ffn_dim)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, hidden, layer: int, attn_metadata, cross) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.self_attn_layer_norm(hidden), attn_metadata)
        hidden = hidden + self.encoder_attn(self.encoder_attn_layer_norm(hidden), layer, cross)
        mlp = self.fc2(nn.functional.gelu(self.fc1(self.final_layer_norm(hidden))))
        return hidden + mlp


class WhisperDecoder(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.embed_positions = nn.Embedding(config.max_target_positions, config.d_model)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.d_model)

    def forward(self, input_ids, positions, attn_metadata, cross) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids) + self.embed_positions(positions)
        for i, layer in enumerate(self.layers):
            hidden = layer(hidden, i, attn_metadata, cross)
        return self.layer_norm(hidden)


class NoRope(nn.Module):
    """Whisper's decoder has learned positions: the loader's rope set-up has nothing to do."""

    def init_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        pass


class WhisperParts(nn.Module):
    """The checkpoint's ``model.*``; ``layers`` and ``embed_tokens`` are the decoder's (the KV
    cache and the tied head find them there)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.encoder = WhisperEncoder(config)
        self.decoder = WhisperDecoder(config)
        self.rotary_emb = NoRope()

    @property
    def layers(self) -> nn.ModuleList:
        return self.decoder.layers

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.decoder.embed_tokens


class WhisperForConditionalGeneration(nn.Module):
    packed_modules: dict[str, tuple[str, int]] = {}
    unused_checkpoint_prefixes: tuple[str, ...] = ()
    unpacked_prefixes = ("model.encoder.",)  # transformers' module: its checkpoint layout

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.model = WhisperParts(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # proj_out
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", True))
        self.max_positions = config.max_target_positions  # the decoder's longest sequence

    @staticmethod
    def checkpoint_name(name: str) -> str:
        return "lm_head." + name[len("proj_out."):] if name.startswith("proj_out.") else name

    def encoder_nodes(self) -> dict:
        """The graph's encoder node (registry: ``AUDIO_CROSS_ATTENTION``) and its call."""
        return {AUDIO_ENCODER: self.encode_audio}

    def encode_audio(self, audio: dict[str, torch.Tensor]) -> torch.Tensor:
        """One window's ``input_features`` [1, mels, 3000] -> the encoder output [1500, dim]."""
        features = audio["input_features"].to(self.model.embed_tokens.weight.dtype)
        return self.model.encoder(features).last_hidden_state[0]

    def cross_states(self, encoded: torch.Tensor) -> torch.Tensor:
        """Every decoder layer's cross-attention K/V: [layers, 2, heads, frames, head_dim]."""
        return torch.stack([layer.encoder_attn.keys_values(encoded)
                            for layer in self.model.decoder.layers])

    def forward(self, input_ids, positions, attn_metadata, cross=None) -> torch.Tensor:
        return self.model.decoder(input_ids, positions, attn_metadata, cross)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
