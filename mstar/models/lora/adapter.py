"""Reads a PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) onto the model.

Each PEFT module (``q_proj``, ``gate_proj``, ...) maps to the model's linear through the same
names the checkpoint loader uses (``resolve_target``): q/k/v land in row ranges of the fused
``qkv_proj``, gate/up in ``gate_up_proj``. A fused linear's shards become one low-rank pair: A
stacks the shards' A rows, B is block-diagonal, so one (x A^T) B^T gives every shard's delta.
The scaling (alpha / r, or alpha / sqrt(r) with rsLoRA) is folded into B.

Under tensor parallelism each rank keeps its part of every pair, cut by the base weight's own rule
(``shard_cut``): B A stands in for the weight [out, in], so a column-parallel linear (q/k/v,
gate/up: the rank's output rows, KV-head replication included) cuts B's rows and keeps A whole,
and a row-parallel one (o_proj, down_proj: the rank's input columns) cuts A's columns and keeps B
whole. Every rank of a replica reads the adapter (at start and at run time), each its own part.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from mstar.models.families.parallel import shard_cut
from mstar.models.loading.loader import resolve_target
from mstar.settings.checks.lora_checks import SUPPORTED_MODULES

_PEFT_PREFIX = "base_model.model."
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


class AdapterError(ValueError):
    """An adapter that cannot be served on this model; the message names what is wrong."""


@dataclass(frozen=True)
class LoraPair:
    """One linear's delta: ``a`` [width, in], ``b`` [out, width], scaling folded into ``b``."""

    a: torch.Tensor
    b: torch.Tensor


@dataclass(frozen=True)
class LoraAdapter:
    name: str
    path: Path
    rank: int
    pairs: dict[str, LoraPair]  # model module name (e.g. model.layers.0.self_attn.qkv_proj)


def read_adapter(name: str, path: Path, model, max_rank: int) -> LoraAdapter:
    """The adapter at ``path`` mapped onto ``model``'s LoRA-capable linears (host memory, the
    model's dtype). Raises AdapterError naming the unsupported module, rank or shape."""
    path = Path(path)
    config = _read_config(path)
    rank = int(config.get("r", 0))
    if not 1 <= rank <= max_rank:
        raise AdapterError(f"adapter {name!r}: rank {rank} is outside 1..{max_rank} "
                           "(MSTAR_MAX_LORA_RANK)")
    scaling = scaling_of(config, rank)
    shards: dict[str, list[tuple[int, int, torch.Tensor, torch.Tensor]]] = {}
    for module, (a, b) in _peft_modules(name, path).items():
        checkpoint = _checkpoint_name(model, module)
        target, offset, size = _target(name, model, module, checkpoint)
        if a.shape[0] != rank or b.shape[1] != rank:
            raise AdapterError(f"adapter {name!r}: {module} has rank {a.shape[0]}, the config {rank}")
        a, b = rank_part(name, model, checkpoint, a, b)
        shards.setdefault(target, []).append((offset, size, a, b * scaling))
    dtype = next(model.parameters()).dtype
    pairs = {t: _fuse(name, t, model.get_submodule(t), parts, dtype) for t, parts in shards.items()}
    return LoraAdapter(name, path, rank, pairs)


def scaling_of(config: dict, rank: int) -> float:
    """PEFT's scaling: lora_alpha / r, or lora_alpha / sqrt(r) when use_rslora is set."""
    alpha = float(config.get("lora_alpha", rank))
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _read_config(path: Path) -> dict:
    try:
        config = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{path}: no readable {CONFIG_FILE} ({exc})") from None
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path}: peft_type {config['peft_type']!r} is not LORA")
    refused = {"use_dora": config.get("use_dora"), "bias": config.get("bias", "none") != "none",
               "modules_to_save": config.get("modules_to_save"),
               "rank_pattern": config.get("rank_pattern"),
               "alpha_pattern": config.get("alpha_pattern")}
    for key, value in refused.items():
        if value:
            raise AdapterError(f"{path}: {key}={config.get(key)!r} is not supported")
    targets = config.get("target_modules")
    if isinstance(targets, list):
        for module in targets:
            _check_module(path, module)
    return config


def _check_module(path, module: str) -> None:
    if module not in SUPPORTED_MODULES:
        raise AdapterError(f"{path}: target module {module!r} is not supported (only "
                           f"{', '.join(sorted(SUPPORTED_MODULES))})")


def _peft_modules(name: str, path: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{checkpoint module name: (A, B)} from the weights file."""
    try:
        tensors = load_file(str(path / WEIGHTS_FILE))
    except (OSError, ValueError) as exc:
        raise AdapterError(f"adapter {name!r}: cannot read {WEIGHTS_FILE} ({exc})") from None
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        stem = key.removeprefix(_PEFT_PREFIX)
        for part in ("lora_A", "lora_B"):
            marker = f".{part}."
            if marker in stem:
                module = stem.split(marker)[0]
                _check_module(path, module.rsplit(".", 1)[-1])
                modules.setdefault(module, {})[part] = tensor.float()
                break
        else:
            raise AdapterError(f"adapter {name!r}: tensor {key!r} is not a LoRA A/B weight")
    if any(len(ab) != 2 for ab in modules.values()):
        raise AdapterError(f"adapter {name!r}: a module lacks its lora_A or lora_B")
    return {m: (ab["lora_A"], ab["lora_B"]) for m, ab in modules.items()}


def rank_part(name: str, model, checkpoint: str, a: torch.Tensor, b: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """This tensor-parallel rank's part of the pair of weight ``checkpoint`` (the whole pair on
    an unsharded model): B's rows where the base weight is cut by rows, else A's columns."""
    cut = shard_cut(model, checkpoint) if hasattr(model, "tp") else None  # as the loader asks
    if cut is None:
        return a, b
    dim, start, length = cut
    whole = b if dim == 0 else a.T  # the factor cut, its cut dim first
    if whole.shape[0] < start + length:  # the rest of the shape is checked once cut (``_fuse``)
        raise AdapterError(f"adapter {name!r}: {checkpoint} has {whole.shape[0]} "
                           f"{'rows' if dim == 0 else 'columns'}, this rank needs "
                           f"[{start}, {start + length}) (another base model?)")
    return (a, b.narrow(0, start, length)) if dim == 0 else (a.narrow(1, start, length), b)


def _checkpoint_name(model, module: str) -> str:
    """The checkpoint weight name of PEFT module ``module`` (the model's renaming applied)."""
    checkpoint = f"{module}.weight"
    rename = getattr(model, "checkpoint_name", None)
    return rename(checkpoint) if rename else checkpoint


def _target(name: str, model, module: str, checkpoint: str) -> tuple[str, int, int | None]:
    """The model's linear for weight ``checkpoint`` and the shard's row range in it."""
    param, offset, size = resolve_target(model, checkpoint)
    target = param.removesuffix(".weight")
    try:
        model.get_submodule(target)
    except AttributeError:
        raise AdapterError(f"adapter {name!r}: module {module!r} is not in this model") from None
    return target, offset, size


def _fuse(name: str, target: str, linear, parts, dtype: torch.dtype) -> LoraPair:
    """One pair for a linear: the shards' A rows stacked, B block-diagonal in the out rows."""
    parts = sorted(parts, key=lambda p: p[0])
    a = torch.cat([p[2] for p in parts])
    b = torch.zeros(linear.out_features, a.shape[0])
    col = 0
    for offset, size, part_a, part_b in parts:
        rows = linear.out_features if size is None else size
        if part_a.shape[1] != linear.in_features or part_b.shape[0] != rows:
            raise AdapterError(f"adapter {name!r}: {target} expects A [r, {linear.in_features}] "
                               f"and B [{rows}, r], got {tuple(part_a.shape)} and "
                               f"{tuple(part_b.shape)} (another base model?)")
        b[offset:offset + rows, col:col + part_a.shape[0]] = part_b
        col += part_a.shape[0]
    return LoraPair(a.to(dtype), b.to(dtype))
