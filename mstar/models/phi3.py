"""Phi-3: the Llama layout with q/k/v and gate/up already fused in the checkpoint,
optional partial rotary and an optional sliding window."""

from mstar.models.layers import RotaryEmbedding, rope_parameters
from mstar.models.llama import LlamaForCausalLM


class Phi3ForCausalLM(LlamaForCausalLM):
    packed_modules: dict = {}  # checkpoint names are the fused ones already

    def __init__(self, config) -> None:
        super().__init__(config)
        rope = rope_parameters(config)
        head_dim = self.model.layers[0].self_attn.head_dim
        rotary_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
        self.model.rotary_emb = RotaryEmbedding(rotary_dim, config.max_position_embeddings, rope)
        for layer in self.model.layers:
            layer.self_attn.sliding_window = getattr(config, "sliding_window", None)

    @staticmethod
    def attention_options(config) -> tuple[bool, bool, bool]:
        return False, False, False
