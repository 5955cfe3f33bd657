"""Speculative decoding as asked, for an engine, in two steps: ``speculative_method`` decides,
before the model runner is made, which method runs (``none`` for a method that cannot run here:
a warning, or an error in strict mode; ``mstar.settings.checks.speculative_checks`` says why), so
the runner can be made with the MTP head it feeds after every forward; ``speculation_for`` then
builds the ``Speculation`` (with the draft model for ``draft``, the runner's head for ``mtp``)."""

from __future__ import annotations

from pathlib import Path

import structlog

from mstar.engine.runner.model_runner import ModelRunner
from mstar.engine.speculative.draft_model import DraftModel
from mstar.engine.speculative.speculation import Speculation
from mstar.models.loading.resolve import ModelError, resolve_model_dir
from mstar.settings import WorkerSettings
from mstar.settings.checks.speculative_checks import draft_model_name, speculation_off_reason

log = structlog.get_logger(__name__)


Method = tuple[str, "Path | None"]  # the method that runs, and the draft model's directory


def speculative_method(settings: WorkerSettings, model_dir: Path) -> Method:
    """The method that runs (the asked one, or ``none`` when it cannot run with this model) and,
    for ``draft``, the draft model's directory (resolved first: the built-in model is converted
    on first use, before its config is checked)."""
    method = settings.speculative_method
    if method == "none":
        return method, None
    draft_dir = _draft_dir(settings) if method == "draft" else None
    reason = speculation_off_reason(settings, model_dir / "config.json")
    if reason is None:
        return method, draft_dir
    if settings.config_strictness == "strict":
        raise ValueError(f"MSTAR_SPECULATIVE_METHOD: {reason}")
    log.warning("speculative_decoding_off", reason=reason, fallback="none")
    return "none", None


def speculation_for(method: Method, settings: WorkerSettings, runner: ModelRunner,
                    max_model_len: int) -> Speculation | None:
    """The ``Speculation`` for ``method`` (from ``speculative_method``); None for ``none``."""
    name, draft_dir = method
    if name == "none":
        return None
    draft = None
    if draft_dir is not None:
        draft = DraftModel(settings, draft_dir, runner.device, runner.dtype, max_model_len)
    hybrid = bool(runner.num_state_slots)  # a rejection recomputes the row
    return Speculation.from_settings(settings, hybrid, draft, runner.mtp)


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
