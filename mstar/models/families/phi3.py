"""Phi-3: the Llama layout with q/k/v and gate/up already fused in the checkpoint, optional
partial rotary, an optional sliding window, and longrope scaling."""

from __future__ import annotations

import math

import structlog
import torch

from mstar.models.families.llama import LlamaForCausalLM
from mstar.models.layers.blocks import RotaryEmbedding, rope_parameters

log = structlog.get_logger(__name__)


class LongRopeEmbedding(RotaryEmbedding):
    """Positions below ``original_max_position_embeddings`` rotate with the short factors, later
    ones with the long factors, and cos/sin are scaled by the attention factor.

    Exact for sequences within the original length. Past it transformers ropes the whole sequence
    with the long factors (it recomputes the cache when a sequence crosses the length); here the
    cached positions keep their short-factor rope, so longer sequences differ from transformers.
    """

    def __init__(self, head_dim: int, max_positions: int, rope: dict, original: int) -> None:
        super().__init__(head_dim, max_positions, rope)
        self.original = original
        factor = rope.get("factor") or max_positions / original
        default = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
        self.attention_factor = rope.get("attention_factor") or default

    def init_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        base = float(self.rope["rope_theta"])

        def inv_freq(name: str) -> torch.Tensor:
            return 1.0 / (torch.tensor(self.rope[name], dtype=torch.float32) * base ** exponents)

        t = torch.arange(self.max_positions, dtype=torch.int64).float()
        freqs = torch.where((t < self.original)[:, None], torch.outer(t, inv_freq("short_factor")),
                            torch.outer(t, inv_freq("long_factor")))
        cos, sin = freqs.cos() * self.attention_factor, freqs.sin() * self.attention_factor
        self.cos_sin = torch.cat([cos, cos, -sin, sin], dim=-1).to(device=device, dtype=dtype)


class Phi3ForCausalLM(LlamaForCausalLM):
    packed_modules: dict = {}  # checkpoint names are the fused ones already

    def __init__(self, config) -> None:
        super().__init__(config)
        rope = rope_parameters(config)
        head_dim = self.model.layers[0].self_attn.head_dim
        rotary_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
        max_positions = config.max_position_embeddings
        if rope.get("rope_type", rope.get("type")) == "longrope":
            original = rope.get("original_max_position_embeddings") or \
                config.original_max_position_embeddings
            self.model.rotary_emb = LongRopeEmbedding(rotary_dim, max_positions, rope, original)
            log.warning("longrope_past_original_length", original_max_position_embeddings=original,
                        detail="sequences longer than this keep short-factor rope on their first "
                               "positions; transformers re-ropes them all with the long factors")
        else:
            self.model.rotary_emb = RotaryEmbedding(rotary_dim, max_positions, rope)
        for layer in self.model.layers:
            layer.self_attn.sliding_window = getattr(config, "sliding_window", None)

    @staticmethod
    def attention_options(config) -> tuple[bool, bool, bool]:
        return False, False, False
