"""A GGUF's tensors as ``read_gguf`` returns them, kept once as safetensors in the cache directory.

gguf's reader parses every metadata field when it opens a file, the tokenizer's vocabulary and
merges included: some 5 s for the built-in model's 100k strings, on every load. The tensors read
from it (dense ones as float32, Q4/Q8 linears in the engine's layouts, q/k rows already in the
model's order) are the same every time for one file and one set of names, so the first load
writes them to one safetensors file and the next loads map it. The key is the file's (its path,
size and modification time: a changed file is read again) and the names asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mstar.models.quant.formats import Int8Weight, Q4Weight, QuantWeight

FORMAT = 1  # bump when the stored layout changes: older files are then not found
Tensors = tuple[dict[str, torch.Tensor], dict[str, QuantWeight], list[str]]  # + types dequantized


def cache_file(cache_dir: Path, file_name: str, names: set[str]) -> Path:
    """Where the tensors ``names`` of the file named ``file_name`` (its stem and key,
    ``gguf_loader.file_key``) are kept."""
    key = hashlib.sha256(json.dumps([sorted(names), FORMAT]).encode()).hexdigest()[:8]
    return Path(cache_dir).expanduser() / "gguf-tensors" / f"{file_name}-{key}.safetensors"


def load(file: Path) -> Tensors | None:
    """The tensors kept in ``file``; None when there is none (or it cannot be read)."""
    if not file.is_file():
        return None
    try:
        with safe_open(str(file), framework="pt") as handle:
            meta = handle.metadata()
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except (OSError, ValueError, RuntimeError):
        return None
    in_features = json.loads(meta["q4_in_features"])
    dense = {n.removeprefix("dense."): t for n, t in tensors.items() if n.startswith("dense.")}
    quant: dict[str, QuantWeight] = {n: Q4Weight(tensors[f"q4.{n}"], k)
                                     for n, k in in_features.items()}
    for name in json.loads(meta["int8"]):
        quant[name] = Int8Weight(tensors[f"int8.{name}.weight"], tensors[f"int8.{name}.scales"])
    return dense, quant, json.loads(meta["dequantized"])


def save(file: Path, found: Tensors) -> None:
    """Keep ``found`` in ``file`` (written whole under another name, then renamed into place)."""
    dense, quant, dequantized = found
    tensors = {f"dense.{n}": t.contiguous() for n, t in dense.items()}
    in_features, int8 = {}, []
    for name, weight in quant.items():
        if isinstance(weight, Q4Weight):
            tensors[f"q4.{name}"] = weight.blocks.contiguous()
            in_features[name] = weight.in_features
        else:
            tensors[f"int8.{name}.weight"] = weight.weight.contiguous()
            tensors[f"int8.{name}.scales"] = weight.scales.contiguous()
            int8.append(name)
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", dir=file.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata={"q4_in_features": json.dumps(in_features),
                                          "int8": json.dumps(int8),
                                          "dequantized": json.dumps(dequantized)})
        os.replace(tmp, file)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
