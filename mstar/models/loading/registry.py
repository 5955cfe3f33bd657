"""Maps ``config.architectures[0]`` to a model class, importing it only when used."""

from __future__ import annotations

import importlib

_MODELS = {
    "LlamaForCausalLM": ("mstar.models.families.llama", "LlamaForCausalLM"),
    "Qwen2ForCausalLM": ("mstar.models.families.qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("mstar.models.families.qwen3", "Qwen3ForCausalLM"),
    "Qwen3MoeForCausalLM": ("mstar.models.families.qwen3_moe", "Qwen3MoeForCausalLM"),
    "MistralForCausalLM": ("mstar.models.families.mistral", "MistralForCausalLM"),
    "Gemma3ForCausalLM": ("mstar.models.families.gemma3", "Gemma3ForCausalLM"),
    "Phi3ForCausalLM": ("mstar.models.families.phi3", "Phi3ForCausalLM"),
    "Olmo2ForCausalLM": ("mstar.models.families.olmo2", "Olmo2ForCausalLM"),
    "SmolLM3ForCausalLM": ("mstar.models.families.smollm3", "SmolLM3ForCausalLM"),
    "Qwen3_5ForCausalLM": ("mstar.models.families.qwen3_5", "Qwen3_5ForCausalLM"),
    "Idefics3ForConditionalGeneration": ("mstar.models.vision.idefics3",
                                         "Idefics3ForConditionalGeneration"),
    "SmolVLMForConditionalGeneration": ("mstar.models.vision.idefics3",
                                        "SmolVLMForConditionalGeneration"),
    "LlavaForConditionalGeneration": ("mstar.models.vision.llava",
                                      "LlavaForConditionalGeneration"),
    "Qwen2_5_VLForConditionalGeneration": ("mstar.models.vision.qwen2_5_vl",
                                           "Qwen2_5_VLForConditionalGeneration"),
    "Gemma3ForConditionalGeneration": ("mstar.models.vision.gemma3",
                                       "Gemma3ForConditionalGeneration"),
    "WhisperForConditionalGeneration": ("mstar.models.audio.whisper",
                                        "WhisperForConditionalGeneration"),
}


# Architectures whose requests may carry images (their graph has a vision encoder node).
_TAKES_IMAGES = frozenset(arch for arch, (module, _) in _MODELS.items() if ".vision." in module)


def accepted_modalities(architectures: list[str] | None) -> tuple[str, ...]:
    """What requests to a model may carry, from ``config.architectures`` (no torch import)."""
    return ("text", "image") if (architectures or [""])[0] in _TAKES_IMAGES else ("text",)


def supported_architectures() -> list[str]:
    return sorted(_MODELS)


def get_model_class(config) -> type:
    archs = getattr(config, "architectures", None) or []
    if not archs or archs[0] not in _MODELS:
        raise ValueError(
            f"unsupported model architecture {archs[:1] or 'missing'}; "
            f"supported: {', '.join(supported_architectures())}"
        )
    module, name = _MODELS[archs[0]]
    return getattr(importlib.import_module(module), name)
