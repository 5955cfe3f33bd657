"""Qwen2: the Llama layout with biases on q/k/v (not on o)."""

from mstar.models.families.llama import LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    @staticmethod
    def attention_options(config) -> tuple[bool, bool, bool]:
        return True, False, False
