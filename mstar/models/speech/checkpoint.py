"""Reading one part of a speech model's checkpoint: the modules mstar runs with transformers'
code (CSM's depth decoder, Mimi) take their tensors from the model's own safetensors files."""

from __future__ import annotations

import torch


def tensors_under(model_dir, prefix: str) -> dict[str, torch.Tensor]:
    """Every checkpoint tensor named ``prefix...``, by its name without the prefix."""
    from safetensors import safe_open

    from mstar.models.loading.loader import checkpoint_files

    found = {}
    for path in checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (not iterable)
                if name.startswith(prefix):
                    found[name.removeprefix(prefix)] = handle.get_tensor(name)
    return found
