"""Turns a prompt with audio markers plus decoded clips into what the engine runs: the token ids
(each marker expanded to the clip's placeholder tokens) and one ``AudioInput`` per clip, for the
placeholder-embedding families (Qwen2-Audio, Voxtral, Qwen3-Omni's thinker).

Each clip's features come from the model's transformers feature extractor on that clip alone, the
way its processor pads them (so a clip is encoded the same whatever else shares its prompt, and
its content hash names its encoder output). Markers are replaced by the clip's placeholder tokens
and the whole text is tokenized once, as Qwen2-Audio's processor does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mstar.models.audio.inputs import AudioInput
from mstar.models.audio.placeholders import (
    QWEN3_OMNI_WINDOW,
    VOXTRAL_FRAMES_PER_ROW,
    qwen2_audio_rows,
    qwen3_omni_rows,
)
from mstar.models.vision.inputs import content_hash

if TYPE_CHECKING:
    import numpy
    import torch


def _qwen2_audio(extractor, clip) -> tuple[dict[str, torch.Tensor], int]:
    """Padded to the encoder's window; the mask says how many frames are the clip's."""
    out = extractor(clip, sampling_rate=extractor.sampling_rate, return_attention_mask=True,
                    padding="max_length", return_tensors="pt")
    mask = out["attention_mask"]
    tensors = {"input_features": out["input_features"], "feature_attention_mask": mask}
    return tensors, qwen2_audio_rows(int(mask.sum()))


def _voxtral(extractor, clip) -> tuple[dict[str, torch.Tensor], int]:
    """Padded to whole windows, each window one row of the encoder's batch."""
    out = extractor(clip, sampling_rate=extractor.sampling_rate, padding=True, truncation=False,
                    pad_to_multiple_of=extractor.n_samples, return_tensors="pt")
    window = extractor.nb_max_frames
    features = out["input_features"].reshape(extractor.feature_size, -1, window).transpose(0, 1)
    return {"input_features": features.contiguous()}, \
        features.shape[0] * window // VOXTRAL_FRAMES_PER_ROW


def qwen3_omni_clip(extractor, clip) -> tuple[dict[str, torch.Tensor], int]:
    """Qwen3-Omni's thinker: the clip's own frames, unpadded (its processor pads a batch to its
    longest clip and drops the padding again before the encoder)."""
    out = extractor(clip, sampling_rate=extractor.sampling_rate, padding=True, truncation=False,
                    return_attention_mask=True, return_tensors="pt")
    frames = int(out["attention_mask"].sum())
    features = out["input_features"][..., :frames].contiguous()
    return {"input_features": features}, qwen3_omni_rows(frames, QWEN3_OMNI_WINDOW)


# processor class -> how one clip becomes its encoder input and placeholder count
_FAMILIES: dict[str, Callable] = {
    "Qwen2AudioProcessor": _qwen2_audio,
    "VoxtralProcessor": _voxtral,
    "Qwen3OmniMoeProcessor": qwen3_omni_clip,
}


def audio_features(processor, clip: numpy.ndarray) -> tuple[dict[str, torch.Tensor], int]:
    """One clip (mono float32 at the extractor's rate) -> its encoder input and placeholders."""
    family = _FAMILIES.get(type(processor).__name__)
    if family is None:
        raise ValueError(f"no audio prompt rule for {type(processor).__name__}; "
                         f"known: {', '.join(sorted(_FAMILIES))}")
    return family(processor.feature_extractor, clip)


def build_audio_prompt(processor, text: str,
                       clips: list[numpy.ndarray]) -> tuple[list[int], list[AudioInput]]:
    """``text`` holds one ``processor.audio_token`` marker per clip, in order; ``clips`` are mono
    float32 at ``processor.feature_extractor.sampling_rate``."""
    marker = processor.audio_token
    pieces = text.split(marker)
    if len(pieces) - 1 != len(clips):
        raise ValueError(f"the prompt has {len(pieces) - 1} audio markers for {len(clips)} clips")
    made = [audio_features(processor, clip) for clip in clips]
    expanded = pieces[0] + "".join(marker * n + rest for (_, n), rest in zip(made, pieces[1:],
                                                                             strict=True))
    ids = processor.tokenizer(expanded, add_special_tokens=False)["input_ids"]
    token = processor.tokenizer.convert_tokens_to_ids(marker)
    where = [i for i, t in enumerate(ids) if t == token]
    if len(where) != sum(n for _, n in made):
        raise ValueError(f"the prompt has {len(where)} audio tokens; its clips fill "
                         f"{sum(n for _, n in made)}")
    inputs, used = [], 0
    sr = processor.feature_extractor.sampling_rate
    for (tensors, n), clip in zip(made, clips, strict=True):
        inputs.append(AudioInput(content_hash(tensors), tensors, tuple(where[used:used + n]),
                                 len(clip) / sr))
        used += n
    return ids, inputs
