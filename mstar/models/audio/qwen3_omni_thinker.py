"""Qwen3-Omni's thinker (``qwen3_omni_moe``'s ``thinker_config``) as an mstar model: mstar's
Qwen3-MoE decoder (``mstar.models.families.qwen3_moe``; the thinker has no shared expert) with
transformers' audio encoder, whose rows fill the clip's placeholders (the audio-in path of
``mstar.models.audio.base``: the registry entry's graph is ``audio_encoder -> language_model``).
The talker and code2wav are not part of this module (``mstar.models.speech``); the checkpoint's
``talker.*``, ``code2wav.*`` and vision tensors are skipped.

Rotary: the thinker's rope is interleaved M-RoPE (three position axes, temporal/height/width,
each owning every third frequency up to its ``mrope_section``). transformers gives text and audio
tokens the same position on all three axes (``get_rope_index``: an audio clip's tokens go on from
the text before it, one position each, and only images and videos take grid positions), and a
frequency rotated by the same position whichever axis owns it is plain rope. So plain 1-D
positions are right for every prompt this module takes; images and videos (which would need the
per-request position table) are refused by the graph, which has no vision encoder.

The audio encoder reads a clip's mel frames in windows of ``2 * n_window`` frames (each through
three stride-2 convolutions) and attends within ``n_window_infer``-frame spans; it has no
projector (its ``output_dim`` is the decoder's width). A clip's features are exactly its frames
(no padding), so the rows are ``qwen3_omni_rows(frames)``.
"""

from __future__ import annotations

import torch
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

from mstar.models.audio.base import AudioLanguageModel
from mstar.models.families.qwen3_moe import Qwen3MoeForCausalLM
from mstar.models.vision.base import VisionLanguageParts

# transformers' save_pretrained layout -> this module's names.
THINKER_CHECKPOINT_PREFIXES = (
    ("thinker.model.", "model.language_model."),
    ("thinker.lm_head.", "lm_head."),
    ("thinker.audio_tower.", "model.audio_tower."),
)
# Not run here: the vision encoder (images are refused), the talker and code2wav (speech out).
THINKER_UNUSED_PREFIXES = ("thinker.visual.", "talker.", "code2wav.")


class Qwen3OmniThinker(AudioLanguageModel):
    text_model_cls = Qwen3MoeForCausalLM
    packed_modules = Qwen3MoeForCausalLM.packed_modules  # experts keep gate/up/down
    unpacked_prefixes = ("model.audio_tower.",)  # its q/k/v stay the checkpoint's
    unused_checkpoint_prefixes = THINKER_UNUSED_PREFIXES
    checkpoint_prefixes = THINKER_CHECKPOINT_PREFIXES

    def __init__(self, config) -> None:
        super().__init__(config)  # text_config: the thinker's (``get_text_config``)
        thinker = config.thinker_config
        self.tie_word_embeddings = bool(getattr(thinker, "tie_word_embeddings", False))
        self.model = VisionLanguageParts(
            "language_model", self.build_text_model(),
            audio_tower=Qwen3OmniMoeAudioEncoder._from_config(thinker.audio_config))
        # The talker reads the hidden state after this many layers at the prompt's media
        # positions (``forward_keeping``; docs/speech.rst, "How the talker consumes the thinker").
        self.talker_layer = config.talker_config.accept_hidden_layer

    def build_text_model(self):
        """Qwen3-MoE's decoder: its family swaps the MLPs for expert blocks in ``__init__``,
        after ``build_model``."""
        return self.text_model_cls(self.text_config).model

    def init_buffers(self, device: torch.device) -> None:
        """The encoder's sinusoidal positions: a non-persistent buffer, not in the checkpoint."""
        table = self.model.audio_tower.positional_embedding
        table.positional_embedding = table.compute_default_singular_positional_embedding().to(
            device=device, dtype=self.model.embed_tokens.weight.dtype)

    def encode(self, clip: dict[str, torch.Tensor]) -> torch.Tensor:
        """``input_features`` [1, mel, frames]: the clip's frames, unpadded."""
        features = clip["input_features"][0].to(self.model.embed_tokens.weight.dtype)
        frames = torch.tensor([features.shape[-1]], device=features.device)
        return self.model.audio_tower(features, feature_lens=frames).last_hidden_state

    def forward_keeping(self, input_ids, positions, attn_metadata, inputs_embeds, layers: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward``'s hidden states, and every row's hidden state after ``layers`` layers (the
        residual stream there: transformers' ``hidden_states[layers]``). The family's loop, so
        the step runs the same kernels; only steps that hand out the talker's rows come here."""
        text = self.model.text
        hidden = text.embed(input_ids) if inputs_embeds is None else inputs_embeds
        cos, sin = text.rotary_emb(positions)
        # after 0 layers: the inputs (a copy: the first layer's residual, added to in place)
        residual, kept = None, hidden.clone() if layers == 0 else None
        for i, layer in enumerate(text.layers):
            hidden, residual = layer(hidden, residual, cos, sin, attn_metadata)
            if i + 1 == layers:
                kept = hidden + residual  # a new tensor: the next norm adds in place
        hidden, _ = text.norm(hidden, residual)
        return hidden, kept
