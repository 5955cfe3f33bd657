"""Mistral: the Llama layout with a sliding attention window on every layer."""

from mstar.models.families.llama import LlamaForCausalLM


class MistralForCausalLM(LlamaForCausalLM):
    def __init__(self, config) -> None:
        super().__init__(config)
        for layer in self.model.layers:
            layer.self_attn.sliding_window = getattr(config, "sliding_window", None)
