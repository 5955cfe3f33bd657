"""Speculative decoding as asked, for an engine: the ``Speculation`` (with the draft model for
``draft``; for ``mtp`` the MTP head, which the runner then feeds after every forward), or None
for ``none`` and for a method that cannot run here (a warning and none; an error in strict mode;
``mstar.settings.checks.speculative_checks`` says why)."""

from __future__ import annotations

from pathlib import Path

import structlog

from mstar.engine.runner.model_runner import ModelRunner
from mstar.engine.speculative.draft_model import DraftModel
from mstar.engine.speculative.mtp_proposer import MtpProposer
from mstar.engine.speculative.speculation import Speculation
from mstar.models.loading.resolve import ModelError, resolve_model_dir
from mstar.settings import WorkerSettings
from mstar.settings.checks.speculative_checks import draft_model_name, speculation_off_reason

log = structlog.get_logger(__name__)


def speculation_for(settings: WorkerSettings, model_dir: Path, runner: ModelRunner,
                    max_model_len: int) -> Speculation | None:
    method = settings.speculative_method
    if method == "none":
        return None
    draft_dir = _draft_dir(settings) if method == "draft" else None
    reason = speculation_off_reason(settings, model_dir / "config.json")
    if reason is None:
        device, dtype = runner.device, runner.dtype
        draft = None if draft_dir is None else DraftModel(settings, draft_dir, device, dtype,
                                                          max_model_len)
        if method == "mtp":
            runner.mtp = MtpProposer(runner.model, model_dir, settings, device, dtype,
                                     max_model_len)
        hybrid = bool(runner.num_state_slots)  # a rejection recomputes the row
        return Speculation.from_settings(settings, hybrid, draft, runner.mtp)
    if settings.config_strictness == "strict":
        raise ValueError(f"MSTAR_SPECULATIVE_METHOD: {reason}")
    log.warning("speculative_decoding_off", reason=reason, fallback="none")
    return None


def _draft_dir(settings: WorkerSettings) -> Path | None:
    """The draft model's directory (the built-in model converted on first use), or None when it
    is unset or unusable (``speculation_off_reason`` then says why)."""
    name = draft_model_name(settings)
    if name is None:
        return None
    try:
        return resolve_model_dir(settings.model_copy(update={"model": name}))
    except ModelError:
        return None
