"""Qwen2-Audio: transformers' Whisper-style audio encoder (two convolutions, bidirectional
layers, a 2x average pool), a linear projector, and mstar's Qwen2 decoder. A clip's features are
padded to the encoder's full window; ``feature_attention_mask`` says which frames are the clip,
and only the rows of those frames fill its placeholders (transformers' masked scatter)."""

from __future__ import annotations

import torch
from transformers import AutoModel
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.qwen2_audio.modeling_qwen2_audio import Qwen2AudioMultiModalProjector

from mstar.models.audio.base import AudioLanguageModel
from mstar.models.audio.placeholders import conv_length, qwen2_audio_rows
from mstar.models.families.qwen2 import Qwen2ForCausalLM
from mstar.models.vision.base import VisionLanguageParts


class Qwen2AudioForConditionalGeneration(AudioLanguageModel):
    text_model_cls = Qwen2ForCausalLM

    def __init__(self, config) -> None:
        super().__init__(config)
        self.model = VisionLanguageParts(
            "language_model", self.build_text_model(),
            audio_tower=AutoModel.from_config(config.audio_config),
            multi_modal_projector=Qwen2AudioMultiModalProjector(config))

    def encode(self, clip: dict[str, torch.Tensor]) -> torch.Tensor:
        """``input_features`` [1, mel, window frames], ``feature_attention_mask`` [1, frames]."""
        tower = self.model.audio_tower
        features = clip["input_features"].to(self.model.embed_tokens.weight.dtype)
        frames = int(clip["feature_attention_mask"].sum())
        window = (features.shape[-1] - 2) // 2 + 1  # the convolutions' output positions
        keep = (torch.arange(window, device=features.device) < conv_length(frames)).long()[None]
        dummy = torch.zeros(1, window, 1, dtype=features.dtype, device=features.device)
        mask = create_bidirectional_mask(config=tower.config, inputs_embeds=dummy,
                                         attention_mask=keep)
        hidden = tower(features, attention_mask=mask).last_hidden_state
        rows = self.model.multi_modal_projector(hidden)[0]
        return rows[:qwen2_audio_rows(frames)]
