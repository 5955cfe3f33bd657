"""How many prompt tokens one image can take at the largest size the settings allow, from the
model's config.json (and preprocessor_config.json beside it, if present), with no torch.

Used by preflight: a MSTAR_MAX_MODEL_LEN that cannot hold one such image (plus a little text)
refuses every request carrying it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Each family's processor default for the longest edge images are resized to.
_IDEFICS3_LONGEST_EDGE = 4 * 364
_QWEN_MAX_PIXELS = 12_845_056


def _preprocessor(config_json: Path) -> dict[str, Any]:
    path = config_json.parent / "preprocessor_config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def max_image_tokens(config: dict[str, Any], config_json: Path, max_pixels: int) -> int | None:
    """Placeholder tokens of the largest image; None for a text-only model (or one not known)."""
    kind = config.get("model_type")
    vision = config.get("vision_config") or {}
    pre = _preprocessor(config_json)
    if kind in ("idefics3", "smolvlm"):
        tile = vision.get("image_size", 364)
        per_tile = (tile // vision.get("patch_size", 14)) ** 2 // config.get("scale_factor", 2) ** 2
        edge = (pre.get("size") or {}).get("longest_edge", _IDEFICS3_LONGEST_EDGE)
        # A square image at the resize target: n x n tiles (each with a tag), plus a global one.
        side = min(edge, math.isqrt(max_pixels)) if pre.get("do_image_splitting", True) else 0
        tiles = math.ceil(side / tile) ** 2 if side > tile else 0
        return (tiles + 1) * per_tile + 2 * tiles + 3
    if kind == "llava":
        return (vision.get("image_size", 336) // vision.get("patch_size", 14)) ** 2
    if kind == "gemma3":
        return int(config.get("mm_tokens_per_image", 256)) + 2
    if kind == "qwen2_5_vl":
        patch = vision.get("patch_size", 14) * vision.get("spatial_merge_size", 2)
        # transformers 5 saves the pixel cap as size.longest_edge; older processors as max_pixels.
        cap = pre.get("max_pixels") or (pre.get("size") or {}).get("longest_edge")
        pixels = min(max_pixels, int(cap or _QWEN_MAX_PIXELS))
        return pixels // (patch * patch) + 2
    return None
