"""``MediaPart``: the union of the typed parts a prompt carries besides its token ids, and the
modality each one is (which encoder node of the model's walk graph takes it)."""

from __future__ import annotations

from mstar.models.audio.inputs import AudioInput
from mstar.models.vision.inputs import ImageInput

MediaPart = ImageInput | AudioInput  # the union of every part type

_MODALITY = {ImageInput: "image", AudioInput: "audio"}  # one row per part type


def modality_of(part: MediaPart) -> str:
    """The modality of ``part``: the graph's encoder node for it is ``encoder_for(modality)``."""
    return _MODALITY[type(part)]
