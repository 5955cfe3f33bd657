"""Speculative decoding as asked, for an engine: the ``Speculation`` (with the draft model for
``draft``), or None for ``none`` and for a method that cannot run here (a warning and none; an
error in strict mode; ``mstar.settings.speculative_checks`` says why)."""

from __future__ import annotations

from pathlib import Path

import structlog
import torch

from mstar.engine.speculative.draft_model import DraftModel
from mstar.engine.speculative.speculation import Speculation
from mstar.models.loading.resolve import ModelError, resolve_model_dir
from mstar.settings import WorkerSettings
from mstar.settings.speculative_checks import speculation_off_reason

log = structlog.get_logger(__name__)


def speculation_for(settings: WorkerSettings, model_dir: Path, hybrid: bool,
                    device: torch.device, dtype: torch.dtype,
                    max_model_len: int) -> Speculation | None:
    """``hybrid``: the target has recurrent-state layers (a rejection recomputes its row)."""
    if settings.speculative_method == "none":
        return None
    draft_dir = _draft_dir(settings) if settings.speculative_method == "draft" else None
    reason = speculation_off_reason(settings, model_dir / "config.json")
    if reason is None:
        draft = None if draft_dir is None else DraftModel(settings, draft_dir, device, dtype,
                                                          max_model_len)
        return Speculation.from_settings(settings, hybrid, draft)
    if settings.config_strictness == "strict":
        raise ValueError(f"MSTAR_SPECULATIVE_METHOD: {reason}")
    log.warning("speculative_decoding_off", reason=reason, fallback="none")
    return None


def _draft_dir(settings: WorkerSettings) -> Path | None:
    """The draft model's directory (the built-in model converted on first use), or None when it
    is unset or unusable (``speculation_off_reason`` then says why)."""
    if settings.speculative_draft_model is None:
        return None
    try:
        return resolve_model_dir(settings.model_copy(
            update={"model": settings.speculative_draft_model}))
    except ModelError:
        return None
