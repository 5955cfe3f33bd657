"""Gemma 3 with images: a SigLIP tower (transformers' own module), the multimodal projector
(average-pooled patches, RMS-normed, projected) and mstar's Gemma 3 text decoder.

During prefill the tokens of one image attend to each other in both directions (the rest stays
causal; sliding layers keep their window): its registry entry's ``bidirectional_image_attention``
asks the engine for that mask, and for chunks that never end inside an image's run (a token
cannot attend to keys a later chunk has not computed yet).
"""

from __future__ import annotations

import torch
from transformers import AutoModel
from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector

from mstar.models.families.gemma3 import Gemma3ForCausalLM
from mstar.models.vision.base import (
    LLAVA_CHECKPOINT_PREFIXES,
    VisionLanguageModel,
    VisionLanguageParts,
    init_position_ids,
)


class Gemma3ForConditionalGeneration(VisionLanguageModel):
    unpacked_prefixes = ("model.vision_tower.", "model.multi_modal_projector.")
    text_model_cls = Gemma3ForCausalLM
    # Google's checkpoints (and transformers' save_pretrained) keep the original layout.
    checkpoint_prefixes = LLAVA_CHECKPOINT_PREFIXES

    def __init__(self, config) -> None:
        super().__init__(config)
        self.model = VisionLanguageParts(
            "language_model", self.build_text_model(),
            vision_tower=AutoModel.from_config(config.vision_config),
            multi_modal_projector=Gemma3MultiModalProjector(config))

    def init_buffers(self, device: torch.device) -> None:
        init_position_ids(self.model.vision_tower, device)

    def encode(self, image: dict[str, torch.Tensor]) -> torch.Tensor:
        """``pixel_values`` [1, 3, H, W]."""
        pixels = image["pixel_values"].to(self.model.embed_tokens.weight.dtype)
        hidden = self.model.vision_tower(pixel_values=pixels, return_dict=True).last_hidden_state
        out = self.model.multi_modal_projector(hidden)
        return out.reshape(-1, out.shape[-1])
