"""A cheap integrity check of ``*.safetensors`` files: the header must describe the file's size.

Reads only each file's header (8 bytes of length, then JSON), so a truncated or overwritten file
fails at start in milliseconds with its name, not deep inside the loader.
"""

from __future__ import annotations

import json
from pathlib import Path

from mstar.models.loading.model_error import ModelError

# Larger headers are refused by the safetensors library itself.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def weights_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete safetensors file, or None."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"it is {size} bytes, too short for a header"
        header_bytes = int.from_bytes(prefix, "little")
        if header_bytes > min(_MAX_HEADER_BYTES, size - 8):
            return f"its header claims {header_bytes} bytes, more than the file holds"
        try:
            header = json.loads(handle.read(header_bytes))
            end = max((t["data_offsets"][1] for name, t in header.items() if name != "__metadata__"),
                      default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "its header is not valid safetensors JSON"
    expected = 8 + header_bytes + end
    if size != expected:
        return f"it is {size} bytes but its header describes {expected}"
    return None


def check_weights(model_dir: Path, fix: str) -> None:
    """Raise a one-line ``ModelError`` naming the first broken weights file and ``fix``."""
    for path in sorted(model_dir.glob("*.safetensors")):
        problem = weights_problem(path)
        if problem is not None:
            raise ModelError(f"{str(path)!r} is truncated or corrupt ({problem}); {fix}")
