"""How many placeholder rows an audio clip takes, per family: the one rule that both the prompt
(``mstar.models.audio.prompt``, in the API server, without torch) and the model's encoder
(``qwen2_audio``, ``voxtral``) follow."""

from __future__ import annotations

# Voxtral: mel frames per row (the encoder's stride-2 convolution, then 4 frames to a row).
VOXTRAL_FRAMES_PER_ROW = 8


def conv_length(frames: int) -> int:
    """Encoder positions of ``frames`` mel frames: the stride-2 convolution."""
    return (frames - 1) // 2 + 1


def qwen2_audio_rows(frames: int) -> int:
    """Qwen2-Audio's rows for a clip of ``frames`` mel frames: the convolutions, then the 2x
    average pool."""
    return (conv_length(frames) - 2) // 2 + 1
