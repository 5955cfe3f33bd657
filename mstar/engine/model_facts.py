"""What the engine reads off a model once, at load: its longest sequence and its end-of-sequence
token ids."""

from __future__ import annotations

import json
from pathlib import Path


def model_max_len(hf_config, asked: int | None) -> int:
    """MSTAR_MAX_MODEL_LEN (``asked``; None: the model's own limit), at most the model's limit
    (ValueError beyond it)."""
    text_config = hf_config.get_text_config()
    # Whisper's decoder names its limit max_target_positions
    limit = (getattr(text_config, "max_target_positions", None)
             or text_config.max_position_embeddings)
    if asked is not None and asked > limit:
        raise ValueError(f"max_model_len={asked} exceeds the model's "
                         f"max_position_embeddings={limit}")
    return asked or limit


def eos_token_ids(tokenizer, model_dir: Path) -> set[int]:
    """The tokenizer's EOS and every one generation_config.json names."""
    ids = set()
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    gen_config = model_dir / "generation_config.json"
    if gen_config.is_file():
        eos = json.loads(gen_config.read_text()).get("eos_token_id")
        ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
    return ids
