"""What the audio-in language models share (Qwen2-Audio, Voxtral): the vision-language model's
shape, with an audio encoder node whose rows fill the clip's placeholder positions. Their walk
graph (their registry entries') is ``AUDIO_PLACEHOLDERS``: ``audio_encoder -> language_model``."""

from __future__ import annotations

from mstar.models.vision.base import VisionLanguageModel

# The original layout (Qwen's and Mistral's checkpoints) -> this package's module names, as
# transformers' own conversion mapping for qwen2_audio (Voxtral's too) renames them.
AUDIO_CHECKPOINT_PREFIXES = (
    ("language_model.model.", "model.language_model."),
    ("language_model.lm_head.", "lm_head."),
    ("audio_tower.", "model.audio_tower."),
    ("multi_modal_projector.", "model.multi_modal_projector."),
)


class AudioLanguageModel(VisionLanguageModel):
    """Subclasses build ``self.model`` (``language_model``, ``audio_tower``,
    ``multi_modal_projector``) and implement ``encode`` (one clip's features -> its rows)."""

    unpacked_prefixes = ("model.audio_tower.", "model.multi_modal_projector.")
    checkpoint_prefixes = AUDIO_CHECKPOINT_PREFIXES
