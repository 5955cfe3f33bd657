"""Qwen3: the Llama layout plus per-head RMSNorm on q and k before rope."""

from mstar.models.families.llama import LlamaForCausalLM


class Qwen3ForCausalLM(LlamaForCausalLM):
    @staticmethod
    def attention_options(config) -> tuple[bool, bool, bool]:
        bias = bool(getattr(config, "attention_bias", False))
        return bias, bias, True
