"""Qwen3-MoE: the Qwen3 layout whose MLPs are sparse mixture-of-experts blocks, except on
``mlp_only_layers`` and layers off the ``decoder_sparse_step`` (those stay dense)."""

from mstar.models.families.qwen3 import Qwen3ForCausalLM
from mstar.models.layers.moe import ExpertMLP, SparseMoeBlock


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    # Only attention is fused; expert and dense MLPs keep the checkpoint's gate/up/down.
    packed_modules = {
        "q_proj": ("qkv_proj", 0),
        "k_proj": ("qkv_proj", 1),
        "v_proj": ("qkv_proj", 2),
    }

    def __init__(self, config) -> None:
        super().__init__(config)
        hidden = config.hidden_size
        for i, layer in enumerate(self.model.layers):
            layer.self_attn.sliding_window = getattr(config, "sliding_window", None)
            sparse = (i not in config.mlp_only_layers and config.num_experts > 0
                      and (i + 1) % config.decoder_sparse_step == 0)
            layer.mlp = SparseMoeBlock(
                hidden, config.moe_intermediate_size, config.num_experts,
                config.num_experts_per_tok, config.norm_topk_prob,
            ) if sparse else ExpertMLP(hidden, config.intermediate_size)
