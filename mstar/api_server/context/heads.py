"""What the served model's classifier logits are, read once at start (no torch): the labels of a
``*ForSequenceClassification`` checkpoint (config.json's ``id2label``), or the two tokens of
MSTAR_SCORE_TOKENS. A model with neither classifies nothing (``()``)."""

from __future__ import annotations

import json
from pathlib import Path

from mstar.models.loading.registry import classifies


def _config(model_dir: Path) -> dict:
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def model_labels(model_dir: Path, score_tokens: str | None) -> tuple[str, ...]:
    """The label of each classifier logit, in order."""
    config = _config(model_dir)
    if classifies(config.get("architectures")):
        names = config.get("id2label") or {}
        count = int(config.get("num_labels") or len(names) or 2)
        return tuple(str(names.get(str(i), f"LABEL_{i}")) for i in range(count))
    return tuple(t.strip() for t in (score_tokens or "").split(",") if t.strip())


def model_generates(model_dir: Path) -> bool:
    """False for a sequence classifier: it has no LM head."""
    return not classifies(_config(model_dir).get("architectures"))
