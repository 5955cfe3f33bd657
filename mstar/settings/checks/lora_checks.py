"""``mstar config validate --model``: the adapters of MSTAR_LORA_MODULES against the base model,
from the files alone (no torch): each adapter's config (rank, target modules) and its tensors'
shapes (read from the safetensors header) against the base's config.json. The worker checks
the same again when it reads the adapters (``mstar.models.lora.adapter``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mstar.settings.knobs.lora import parse_lora_modules
from mstar.settings.schema import WorkerSettings

# The projections an adapter may target: attention and MLP, in PEFT's (checkpoint) names.
SUPPORTED_MODULES = frozenset({"q_proj", "k_proj", "v_proj", "o_proj",
                               "gate_proj", "up_proj", "down_proj"})
_MAX_HEADER = 100 << 20  # safetensors caps its JSON header at 100 MB


def lora_problems(settings: WorkerSettings, base_config: dict[str, Any]) -> list[str]:
    """What keeps each configured adapter off this base model (each names the adapter)."""
    try:
        adapters = parse_lora_modules(settings.lora_modules)
    except ValueError as exc:
        return [str(exc)]
    dims = _dims(base_config)
    found = []
    for name, path in adapters.items():
        reason = _adapter_problem(Path(path).expanduser(), settings.max_lora_rank, dims)
        if reason is not None:
            found.append(f"adapter {name!r} ({path}): {reason}")
    return found


def _dims(config: dict[str, Any]) -> dict[str, tuple[int, int]] | None:
    """(in, out) of each supported module in the base model; None when config.json lacks them."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    try:
        hidden, inter = int(text["hidden_size"]), int(text["intermediate_size"])
        heads = int(text["num_attention_heads"])
        head_dim = int(text.get("head_dim") or hidden // heads)
        kv = int(text.get("num_key_value_heads") or heads) * head_dim
    except (KeyError, TypeError, ValueError):
        return None
    q = heads * head_dim
    return {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv),
            "o_proj": (q, hidden), "gate_proj": (hidden, inter), "up_proj": (hidden, inter),
            "down_proj": (inter, hidden)}


def _adapter_problem(path: Path, max_rank: int, dims) -> str | None:
    try:
        config = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
        with (path / "adapter_model.safetensors").open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(min(size, _MAX_HEADER)))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"unreadable ({exc})"
    rank = config.get("r")
    if not isinstance(rank, int) or not 1 <= rank <= max_rank:
        return f"rank {rank!r} is outside 1..{max_rank} (MSTAR_MAX_LORA_RANK)"
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        module = key.split(".lora_")[0].rsplit(".", 1)[-1]
        if module not in SUPPORTED_MODULES:
            return f"target module {module!r} is not supported"
        if dims is not None:
            expect = _shape(key, dims[module], rank)
            if list(meta.get("shape", [])) != expect:
                return f"{key} has shape {meta.get('shape')}, the base needs {expect}"
    return None


def _shape(key: str, dims: tuple[int, int], rank: int) -> list[int]:
    """lora_A is [rank, in], lora_B [out, rank]."""
    return [rank, dims[0]] if ".lora_A." in key else [dims[1], rank]
