"""What the served model takes, read once at start: its modalities (from config.json's
architecture) and, for a vision model, its processor (transformers' PIL image processor)."""

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
    if "image" not in modalities:
        return ModelMedia(modalities)
    from mstar.models.vision.inputs import load_processor

    return ModelMedia(modalities, load_processor(model_dir))
