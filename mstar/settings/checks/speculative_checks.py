"""Whether the asked-for speculative decoding method can run, from the settings and the model
files only (no torch): preflight reports it, and the engine falls back to none on it (a warning;
an error in strict mode).

The draft proposer needs a draft model (``MSTAR_SPECULATIVE_DRAFT_MODEL``) whose tokenizer is the
target's: the same vocabulary size in config.json and, where both ship a ``tokenizer.json``, the
same token -> id mapping (its ``model.vocab`` and added tokens). The draft runs without tensor
parallelism and keeps only K/V (no recurrent-state layers). The MTP proposer needs a model whose
config names MTP layers and whose checkpoint ships them (``mtp.fc.*``, read from the safetensors
headers), without tensor parallelism.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mstar.settings.schema import BUILTIN_MODEL, WorkerSettings

_BUILTIN_ALIASES = ("builtin", BUILTIN_MODEL)
_STATE_LAYER_TYPES = ("linear_attention",)
_MTP_FC = "mtp.fc."  # the MTP head's first projection: its checkpoints have it
_MAX_HEADER = 100 << 20  # safetensors caps its JSON header at 100 MB


def speculation_off_reason(settings: WorkerSettings,
                           target_config: Path | None = None) -> str | None:
    """Why the asked-for method cannot run with these settings and this model (its config.json
    at ``target_config``; without it the draft's vocabulary is not compared), or None. The
    overlap cap ``auto`` yields to speculative decoding (the engine then runs the serial loop);
    an explicit cap above 0 wins over it."""
    method = settings.speculative_method
    if method == "mtp" and target_config is not None:
        reason = mtp_off_reason(settings, target_config)
        if reason is not None:
            return f"mtp: {reason}; falling back to none"
    if method == "draft":
        reason = draft_off_reason(settings, target_config)
        if reason is not None:
            return f"draft: {reason}; falling back to none"
    if method != "none" and settings.max_consecutive_spec_steps not in ("auto", 0):
        return ("speculative decoding runs in the serial loop only and MSTAR_MAX_CONSECUTIVE_"
                "SPEC_STEPS > 0 asks for the overlapped one; falling back to none")
    return None


def draft_model_name(settings: WorkerSettings) -> str | None:
    """The draft model as ``MSTAR_MODEL`` would name it (``builtin``: the built-in model)."""
    draft = settings.speculative_draft_model
    return BUILTIN_MODEL if draft in _BUILTIN_ALIASES else draft


def draft_config_path(settings: WorkerSettings) -> Path | None:
    """The draft model's config.json (the built-in model: where its conversion puts it)."""
    draft = draft_model_name(settings)
    if draft is None:
        return None
    if draft == BUILTIN_MODEL:
        return Path(settings.cache_dir).expanduser() / "models" / BUILTIN_MODEL / "config.json"
    return Path(draft).expanduser() / "config.json"


def draft_off_reason(settings: WorkerSettings, target_config: Path | None) -> str | None:
    draft_config = draft_config_path(settings)
    if draft_config is None:
        return "no draft model is set (MSTAR_SPECULATIVE_DRAFT_MODEL)"
    if settings.tensor_parallel_size > 1:
        return "the draft model runs without tensor parallelism (MSTAR_TENSOR_PARALLEL_SIZE > 1)"
    draft = _read(draft_config)
    if draft is None:
        return f"cannot read the draft model's config {str(draft_config)!r}"
    if any(t in _STATE_LAYER_TYPES for t in _text(draft).get("layer_types") or ()):
        return "the draft model has recurrent-state (linear-attention) layers"
    target = None if target_config is None else _read(target_config)
    if target is None:
        return None
    if _text(draft).get("vocab_size") != _text(target).get("vocab_size"):
        return (f"the draft model's vocabulary ({_text(draft).get('vocab_size')} tokens) is not "
                f"the target's ({_text(target).get('vocab_size')})")
    mine, theirs = _vocab(draft_config.parent), _vocab(target_config.parent)
    if mine is not None and theirs is not None and mine != theirs:
        return "the draft model's tokenizer maps tokens to other ids than the target's"
    return None


def mtp_off_reason(settings: WorkerSettings, target_config: Path) -> str | None:
    if settings.tensor_parallel_size > 1:
        return "the MTP head runs without tensor parallelism (MSTAR_TENSOR_PARALLEL_SIZE > 1)"
    config = _read(target_config) or {}
    if not _text(config).get("mtp_num_hidden_layers"):
        return "the model's config names no MTP layers (mtp_num_hidden_layers)"
    if not any(name.startswith(_MTP_FC) for name in _tensor_names(target_config.parent)):
        return "the model's checkpoint has no MTP weights (mtp.*)"
    return None


def _tensor_names(model_dir: Path) -> set[str]:
    """The tensor names of a safetensors checkpoint, from its index or the files' headers."""
    index = _read(model_dir / "model.safetensors.index.json")
    if index is not None:
        return set(index.get("weight_map") or {})
    names: set[str] = set()
    for path in sorted(model_dir.glob("*.safetensors")):
        try:
            with path.open("rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                names |= set(json.loads(handle.read(min(size, _MAX_HEADER))))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
    return names - {"__metadata__"}


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _text(config: dict[str, Any]) -> dict[str, Any]:
    """The text model's part of a config (vision-language configs nest it)."""
    return config.get("text_config") or config


def _vocab(model_dir: Path) -> tuple[Any, Any] | None:
    """(token -> id, added tokens' (id, content)) of a ``tokenizer.json``, or None without one."""
    tokenizer = _read(model_dir / "tokenizer.json")
    if tokenizer is None:
        return None
    added = sorted((t.get("id"), t.get("content")) for t in tokenizer.get("added_tokens") or ())
    return (tokenizer.get("model") or {}).get("vocab"), added

