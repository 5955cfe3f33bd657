"""What the served model takes, read once at start: its modalities (from its architecture's walk
graph, in the registry, with no torch import) and, for a model with an encoder node, its
transformers processor: the PIL image processor of a vision model, or the processor holding the
feature extractor of an audio model (Qwen2-Audio, Voxtral, Whisper)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mstar.models.loading.registry import accepted_modalities


@dataclass(frozen=True)
class ModelMedia:
    modalities: tuple[str, ...] = ("text",)
    processor: Any = None


def model_media(model_dir: Path) -> ModelMedia:
    config = Path(model_dir) / "config.json"
    try:
        archs = json.loads(config.read_text(encoding="utf-8")).get("architectures")
    except (OSError, ValueError, AttributeError):
        return ModelMedia()
    modalities = accepted_modalities(archs)
    if "image" in modalities:
        from mstar.models.vision.inputs import load_processor

        return ModelMedia(modalities, load_processor(model_dir))
    if "audio" in modalities:  # its feature extractor runs each clip (``processor.feature_extractor``)
        from transformers import AutoProcessor

        return ModelMedia(modalities, AutoProcessor.from_pretrained(model_dir))
    return ModelMedia(modalities)
