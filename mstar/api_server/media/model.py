"""What the served model takes, read once at start: its modalities (from its architecture's walk
graph, in the registry, with no torch import) and, for a model with an encoder node, its
transformers processor: the PIL image processor of a vision model, or the processor holding the
feature extractor of an audio model (Qwen2-Audio, Voxtral, Whisper); and what its classifier head
gives (``context.heads``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mstar.api_server.context.heads import model_generates, model_labels
from mstar.models.loading.registry import (
    accepted_modalities,
    output_modalities,
    speaks_replies,
)


@dataclass(frozen=True)
class ModelMedia:
    modalities: tuple[str, ...] = ("text",)
    processor: Any = None
    # What its classifier head's logits are, and whether it generates (``scoring.labels``).
    labels: tuple[str, ...] = ()
    generates: bool = True
    outputs: tuple[str, ...] = ("text",)  # what its graph emits (speech out: "audio")
    voices: tuple[str, ...] = ()  # a speaking model's voices (``model_voices``)
    # its speech is a chat reply (``registry.speaks_replies``: Qwen3-Omni), not a turn of its
    # own (CSM)
    speaks_replies: bool = False


def model_media(model_dir: Path, score_tokens: str | None = None) -> ModelMedia:
    """``score_tokens``: MSTAR_SCORE_TOKENS."""
    heads = {"labels": model_labels(model_dir, score_tokens),
             "generates": model_generates(model_dir)}
    config = Path(model_dir) / "config.json"
    try:
        facts = json.loads(config.read_text(encoding="utf-8"))
        archs = facts.get("architectures")
    except (OSError, ValueError, AttributeError):
        return ModelMedia(**heads)
    modalities = accepted_modalities(archs)
    heads["outputs"] = output_modalities(archs)
    if "audio" in heads["outputs"]:
        heads["voices"] = model_voices(facts)
    heads["speaks_replies"] = speaks_replies(archs)
    if "image" in modalities:
        from mstar.models.vision.inputs import load_processor

        return ModelMedia(modalities, load_processor(model_dir), **heads)
    if "audio" in modalities:  # its feature extractor runs each clip (``processor.feature_extractor``)
        from transformers import AutoProcessor

        return ModelMedia(modalities, AutoProcessor.from_pretrained(model_dir), **heads)
    return ModelMedia(modalities, **heads)


def model_voices(config: dict[str, Any]) -> tuple[str, ...]:
    """The voices of a speaking model's config.json: Qwen3-Omni's talker speaker ids
    (``talker_config.speaker_id``'s keys); () when it names none."""
    talker = config.get("talker_config")
    speakers = talker.get("speaker_id") if isinstance(talker, dict) else None
    return tuple(speakers) if isinstance(speakers, dict) else ()
