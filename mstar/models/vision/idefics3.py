"""Idefics3 and SmolVLM: a SigLIP-style tower over each tile (image splitting: rows x cols tiles
plus a global image), a pixel-shuffle connector, and a Llama-family (SmolLM2) decoder."""

from __future__ import annotations

import torch
from transformers.models.idefics3 import modeling_idefics3 as hf_idefics3
from transformers.models.smolvlm import modeling_smolvlm as hf_smolvlm

from mstar.models.vision.base import VisionLanguageModel, VisionLanguageParts


class Idefics3ForConditionalGeneration(VisionLanguageModel):
    unpacked_prefixes = ("model.vision_model.", "model.connector.")
    hf = hf_idefics3
    prefix = "Idefics3"

    def __init__(self, config) -> None:
        super().__init__(config)
        vision = getattr(self.hf, f"{self.prefix}VisionTransformer")._from_config(
            config.vision_config)
        connector = getattr(self.hf, f"{self.prefix}Connector")(config)
        self.model = VisionLanguageParts("text_model", self.build_text_model(),
                                         vision_model=vision, connector=connector)
        self.patch_size = config.vision_config.patch_size

    def encode(self, image: dict[str, torch.Tensor]) -> torch.Tensor:
        """``pixel_values`` [1, tiles, 3, H, W] and ``pixel_attention_mask`` [1, tiles, H, W]."""
        pixels = image["pixel_values"][0].to(self.model.embed_tokens.weight.dtype)
        mask = image["pixel_attention_mask"][0].bool()
        p = self.patch_size
        patches = mask.unfold(1, p, p).unfold(2, p, p)
        patch_mask = patches.sum(dim=(-1, -2)) > 0
        hidden = self.model.vision_model(pixel_values=pixels, patch_attention_mask=patch_mask,
                                         return_dict=True).last_hidden_state
        out = self.model.connector(hidden)
        return out.reshape(-1, out.shape[-1])


class SmolVLMForConditionalGeneration(Idefics3ForConditionalGeneration):
    hf = hf_smolvlm
    prefix = "SmolVLM"
