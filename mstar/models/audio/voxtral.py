"""Voxtral: transformers' Whisper-style audio encoder over windows of the clip (each padded to
the encoder's full window), every 4 consecutive frames of its output concatenated into one row
(``audio_config.intermediate_size`` = 4 x ``d_model``), a two-layer projector, and mstar's Llama
decoder."""

from __future__ import annotations

import torch
from transformers import AutoModel
from transformers.models.voxtral.modeling_voxtral import VoxtralMultiModalProjector

from mstar.models.audio.base import AudioLanguageModel
from mstar.models.families.llama import LlamaForCausalLM
from mstar.models.vision.base import VisionLanguageParts


class VoxtralForConditionalGeneration(AudioLanguageModel):
    text_model_cls = LlamaForCausalLM

    def __init__(self, config) -> None:
        super().__init__(config)
        self.model = VisionLanguageParts(
            "language_model", self.build_text_model(),
            audio_tower=AutoModel.from_config(config.audio_config),
            multi_modal_projector=VoxtralMultiModalProjector(config))
        self.row_width = config.audio_config.intermediate_size

    def encode(self, clip: dict[str, torch.Tensor]) -> torch.Tensor:
        """``input_features`` [windows, mel, window frames]."""
        features = clip["input_features"].to(self.model.embed_tokens.weight.dtype)
        hidden = self.model.audio_tower(features, return_dict=True).last_hidden_state
        return self.model.multi_modal_projector(hidden.reshape(-1, self.row_width))
