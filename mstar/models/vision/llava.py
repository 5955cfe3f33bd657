"""LLaVA: a CLIP or SigLIP tower (transformers' own module), one of its hidden layers taken
(CLS dropped for the 'default' strategy), a two-layer projector, and an mstar text decoder."""

from __future__ import annotations

import torch
from transformers import AutoModel
from transformers.models.llava.modeling_llava import LlavaMultiModalProjector

from mstar.models.vision.base import (
    LLAVA_CHECKPOINT_PREFIXES,
    VisionLanguageModel,
    VisionLanguageParts,
    init_position_ids,
)


class LlavaForConditionalGeneration(VisionLanguageModel):
    unpacked_prefixes = ("model.vision_tower.", "model.multi_modal_projector.")
    # llava-hf checkpoints (and transformers' save_pretrained) keep the original layout.
    checkpoint_prefixes = LLAVA_CHECKPOINT_PREFIXES

    def __init__(self, config) -> None:
        super().__init__(config)
        if not isinstance(config.vision_feature_layer, int):
            raise ValueError("unsupported vision_feature_layer (a list); supported: one layer")
        self.model = VisionLanguageParts(
            "language_model", self.build_text_model(),
            vision_tower=AutoModel.from_config(config.vision_config),
            multi_modal_projector=LlavaMultiModalProjector(config))
        self.feature_layer = config.vision_feature_layer
        self.drop_cls = config.vision_feature_select_strategy == "default"

    def init_buffers(self, device: torch.device) -> None:
        init_position_ids(self.model.vision_tower, device)

    def encode(self, image: dict[str, torch.Tensor]) -> torch.Tensor:
        """``pixel_values`` [1, 3, H, W]."""
        pixels = image["pixel_values"].to(self.model.embed_tokens.weight.dtype)
        out = self.model.vision_tower(pixels, output_hidden_states=True, return_dict=True)
        hidden = out.hidden_states[self.feature_layer]
        if self.drop_cls:
            hidden = hidden[:, 1:]
        return self.model.multi_modal_projector(hidden).reshape(-1, self.text_config.hidden_size)
