"""SmolLM3: the Llama layout where some layers skip rope (``no_rope_layers[i] == 0``)."""

from mstar.models.families.llama import LlamaForCausalLM


class SmolLM3ForCausalLM(LlamaForCausalLM):
    def __init__(self, config) -> None:
        super().__init__(config)
        layer_types = getattr(config, "layer_types", None) or []
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            attn.use_rope = bool(config.no_rope_layers[i])
            if config.use_sliding_window and i < len(layer_types) \
                    and layer_types[i] == "sliding_attention":
                attn.sliding_window = config.sliding_window
