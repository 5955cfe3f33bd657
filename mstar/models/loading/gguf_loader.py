"""GGUF files as models, read with the ``gguf`` package.

Q4_0, Q4_1 and Q8_0 tensors of linear layers load straight into the engine's q4 / int8 layouts
(mstar.models.quant.formats): block bytes are split or re-labelled, never converted to float. A
Q4_0 block (scale d, values q - 8) is a Q4_1 block with minimum -8d, exact in fp16. Every other
tensor is dense; quantized types other than those three are dequantized with one warning that
names them. The config and tokenizer are derived once by transformers and cached next to a note
that points back at the file (``gguf_model_dir``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import structlog
import torch

from mstar.models.loading import gguf_tensor_cache
from mstar.models.loading.model_error import ModelError
from mstar.models.quant.formats import Int8Weight, Q4Weight, QuantWeight, q4_from_parts, select_rows
from mstar.settings.checks.auto_precision import GGUF_SOURCE_FILE, ships_gguf

log = structlog.get_logger(__name__)

# Architectures whose converter permuted the q/k rows for llama.cpp's rope layout.
_PERMUTED_QK = ("llama",)


def file_key(path: Path) -> str:
    """Names one version of a file in the cache: its resolved path, size and modification time
    (a changed file gets another key, so it is read again)."""
    path = path.expanduser().resolve()
    stat = path.stat()
    return hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]


def gguf_model_dir(path: Path, cache_dir: Path) -> Path:
    """A directory with the GGUF's config and tokenizer (weights stay in the GGUF), made once."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise ModelError(f"GGUF model {str(path)!r} does not exist or is not a file")
    target = Path(cache_dir).expanduser() / "gguf" / f"{path.stem}-{file_key(path)}"
    if (target / GGUF_SOURCE_FILE).is_file():
        return target
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        if not config.architectures:  # GGUF metadata names the family, not the class
            config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[config.model_type]]
        config.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(tmp)
        (tmp / GGUF_SOURCE_FILE).write_text(json.dumps({"gguf": str(path)}), encoding="utf-8")
        if not target.exists():  # else another process made it meanwhile; ours is dropped below
            os.replace(tmp, target)
    except Exception as error:
        raise ModelError(f"cannot read GGUF model {str(path)!r}: {error}") from error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def gguf_source(model_dir: Path, quantization: str) -> Path | None:
    """The GGUF to load weights from: a GGUF model's file, or the built-in model's file under q4
    and at its shipped precision (``shipped``, what ``auto`` resolves to: ``loading.shipped``)."""
    note = Path(model_dir) / GGUF_SOURCE_FILE
    if note.is_file():
        return Path(json.loads(note.read_text(encoding="utf-8"))["gguf"])
    if quantization in ("q4", "shipped") and ships_gguf(model_dir):  # the built-in model
        from mstar.models.loading.builtin import builtin_gguf_path

        return builtin_gguf_path()
    return None


def read_gguf(path: Path, names: set[str], config, cache_dir: Path | None = None
              ) -> tuple[dict[str, torch.Tensor], dict[str, QuantWeight]]:
    """The checkpoint tensors ``names`` (HF names): dense ones as float32, Q4/Q8 weights
    quantized. With ``cache_dir``, read from the file once and then from the cache
    (``gguf_tensor_cache``: opening a GGUF parses its whole vocabulary)."""
    file = None if cache_dir is None else gguf_tensor_cache.cache_file(
        cache_dir, f"{path.stem}-{file_key(path)}", names)
    found = None if file is None else gguf_tensor_cache.load(file)
    if found is None:
        found = _read_file(path, names, config)
        if file is not None:
            try:
                gguf_tensor_cache.save(file, found)
            except OSError as error:  # a read-only or full cache: the next load reads the file
                log.warning("gguf_tensor_cache_not_written", path=str(file), error=str(error))
    dense, quant, dequantized = found
    if dequantized:
        log.warning("gguf_tensors_dequantized", path=str(path), types=dequantized)
    missing = names - dense.keys() - quant.keys()
    if missing:
        raise ModelError(f"GGUF {str(path)!r} lacks tensors for: {sorted(missing)[:5]}")
    return dense, quant


def _read_file(path: Path, names: set[str], config) -> gguf_tensor_cache.Tensors:
    import gguf

    reader = gguf.GGUFReader(path)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    name_map = gguf.get_tensor_name_map(arch_enum, config.num_hidden_layers)
    wanted = {name_map.get_name(n, try_suffixes=(".weight", ".bias")): n for n in names}
    types = gguf.GGMLQuantizationType
    dense: dict[str, torch.Tensor] = {}
    quant: dict[str, QuantWeight] = {}
    dequantized: set[str] = set()
    for tensor in reader.tensors:
        name = wanted.get(tensor.name)
        if name is None:
            continue
        kind = tensor.tensor_type
        order = _row_order(name, arch, config)
        if kind in (types.Q4_0, types.Q4_1, types.Q8_0) and tensor.data.ndim == 2:
            weight = _shipped(np.asarray(tensor.data), kind.name)
            quant[name] = weight if order is None else select_rows(weight, order)
            continue
        if kind not in (types.F32, types.F16, types.BF16):
            dequantized.add(kind.name)
        values = torch.from_numpy(np.array(gguf.quants.dequantize(tensor.data, kind), np.float32))
        values = values.reshape(tuple(reversed(tensor.shape.tolist())))
        dense[name] = values if order is None else values[order]
    return dense, quant, sorted(dequantized)


def _shipped(data: np.ndarray, kind: str) -> QuantWeight:
    """Q4_0 / Q4_1 / Q8_0 rows of block bytes as the engine's q4 / int8 layout."""
    rows = data.shape[0]
    raw = torch.from_numpy(data.copy())
    if kind == "Q4_1":
        return Q4Weight(raw.contiguous(), raw.shape[1] // 20 * 32)
    if kind == "Q4_0":
        blocks = raw.view(rows, -1, 18)
        d = blocks[..., :2].contiguous().view(torch.float16)
        q = blocks[..., 2:]
        q = torch.cat([q & 0x0F, q >> 4], dim=-1)
        return q4_from_parts(d, (d.float() * -8).half(), q)
    blocks = raw.view(rows, -1, 34)
    scales = blocks[..., :2].contiguous().view(torch.float16).float().reshape(rows, -1)
    weight = blocks[..., 2:].contiguous().view(torch.int8).reshape(rows, -1)
    return Int8Weight(weight.contiguous(), scales.contiguous())


def _row_order(name: str, arch: str, config) -> torch.Tensor | None:
    """Row order undoing llama.cpp's q/k permutation (the inverse of convert_hf_to_gguf's)."""
    if arch not in _PERMUTED_QK or not name.endswith(("q_proj.weight", "k_proj.weight")):
        return None
    heads = config.num_attention_heads if "q_proj" in name else config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rows = heads * head_dim
    return torch.arange(rows).reshape(heads, head_dim // 2, 2).transpose(1, 2).reshape(rows)
