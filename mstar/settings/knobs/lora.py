"""LoRA adapters served on the base model (docs/lora.rst): which to load at start, how many
device slots, the largest rank, and whether (and from where) adapters load at run time.

None of these is reloadable: the slots are allocated beside the model when the worker starts.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from pydantic import BaseModel

from mstar.settings.knobs.field import knob

_lora = functools.partial(knob, category="LoRA adapters")

# An adapter's name is also a model name in the API: no '=' or ',' (the list's separators).
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")
MAX_LORA_RANK = 1024  # the largest rank MSTAR_MAX_LORA_RANK accepts
MAX_LORA_SLOTS = 1024  # the most slots MSTAR_MAX_LORAS accepts


def parse_lora_modules(text: str | None) -> dict[str, str]:
    """``name=path,name=path`` as {name: path}; a ValueError names the knob and the bad pair.
    Read where the adapters are used (the worker at start, the API server's model names), so a
    bad list stops the start with this message."""
    pairs: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, path = (s.strip() for s in part.partition("="))
        if not sep or not path:
            raise ValueError(f"MSTAR_LORA_MODULES: {part.strip()!r} is not name=path")
        if not ADAPTER_NAME.match(name):
            raise ValueError(f"MSTAR_LORA_MODULES: adapter name {name!r}: letters, digits and "
                             "._:/- only")
        if name in pairs:
            raise ValueError(f"MSTAR_LORA_MODULES: adapter name {name!r} is given twice")
        pairs[name] = path
    return pairs


class LoraKnobs(BaseModel):
    lora_modules: str | None = _lora(
        None, "LoRA adapters (PEFT format: adapter_config.json + adapter_model.safetensors) to "
        "load at start, as name=path pairs separated by commas. Each name is then a model name "
        "in the API (its base as parent) and SamplingParams(lora=name) offline.")
    max_lora_rank: int = _lora(
        16, "Largest adapter rank accepted; the device slots are sized for it.", unit="rank",
        ge=1, le=MAX_LORA_RANK)
    max_loras: int = _lora(
        4, "Adapters resident on the device at once (slots). A step runs at most this many "
        "distinct adapters; a request whose adapter finds no free slot waits, and the least "
        "recently used idle adapter is evicted (it stays loaded in host memory).",
        unit="adapters", ge=1, le=MAX_LORA_SLOTS)
    allow_runtime_lora_updating: bool = _lora(
        False, "Allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (behind "
        "MSTAR_API_KEY when it is set). Paths must be inside MSTAR_LORA_DIR.", security=True)
    lora_dir: Path | None = _lora(
        None, "The only directory run-time loading may read adapters from (a path outside it, "
        "after resolving links, is refused). Unset: run-time loading reads nothing.")
