"""How many placeholder rows an audio clip takes, per family: the one rule that both the prompt
(``mstar.models.audio.prompt``, in the API server, without torch) and the model's encoder
(``qwen2_audio``, ``voxtral``, ``qwen3_omni_thinker``) follow."""

from __future__ import annotations

# Qwen3-Omni: its processor reads mel frames in windows of 2 x this (its own constant: it never
# reads the audio config's n_window).
QWEN3_OMNI_WINDOW = 50
# Voxtral: mel frames per row (the encoder's stride-2 convolution, then 4 frames to a row).
VOXTRAL_FRAMES_PER_ROW = 8


def conv_length(frames: int) -> int:
    """Encoder positions of ``frames`` mel frames: the stride-2 convolution."""
    return (frames - 1) // 2 + 1


def qwen2_audio_rows(frames: int) -> int:
    """Qwen2-Audio's rows for a clip of ``frames`` mel frames: the convolutions, then the 2x
    average pool."""
    return (conv_length(frames) - 2) // 2 + 1


def qwen3_omni_rows(frames: int, n_window: int) -> int:
    """Qwen3-Omni's thinker: rows for ``frames`` mel frames, read in windows of ``2 * n_window``
    frames, each through three stride-2 convolutions. transformers'
    ``_get_feat_extract_output_lengths`` writes a whole window's rows as 13, right at the
    n_window=50 of Qwen's checkpoints and processor (which never reads the config's), the only
    value its encoder runs correctly with; the tiny test model uses it too."""
    window = 2 * n_window
    tail = (frames % window - 1) // 2 + 1
    return ((tail - 1) // 2 + 1 - 1) // 2 + 1 + frames // window * _rows_per_window(window)


def _rows_per_window(window: int) -> int:
    """Rows of one whole window of ``window`` frames: three stride-2 convolutions."""
    for _ in range(3):
        window = (window - 1) // 2 + 1
    return window
