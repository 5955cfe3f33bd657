"""Builds a model from an HF-format directory: config + memory-mapped safetensors."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import structlog
import torch
from safetensors import safe_open
from tqdm import tqdm

from mstar.kernels.cpu.build import native_kernels
from mstar.models.families.parallel import TensorParallel, build_sharded, shard_tensor
from mstar.models.layers.cpu_bf16_linear import runs_bf16_kernel, use_bf16_kernel
from mstar.models.layers.cpu_linear import can_pack, native_bf16, pack_linears
from mstar.models.layers.fused_ops import native_ops_usable, use_native_ops
from mstar.models.loading.gguf_loader import gguf_source, read_gguf
from mstar.models.loading.registry import get_model_class
from mstar.models.lora.linear import wrap_lora_linears
from mstar.models.quant.apply import MODES as QUANT_MODES
from mstar.models.quant.apply import install_quantized, quantize_dense
from mstar.models.quant.formats import QuantWeight, concat_rows, dequantize, part_rows, same_layout
from mstar.settings.checks.auto_precision import SHIPPED

log = structlog.get_logger(__name__)

# Show a progress bar only when loading takes long enough to be worth watching.
_PROGRESS_MIN_TENSORS = 200


def load_model(model_dir: Path, config, device: torch.device, dtype: torch.dtype,
               prepack: bool = True, quantization: str = "none",
               cache_dir: Path = Path("~/.cache/mstar"), parallel: TensorParallel | None = None,
               lora_slots: tuple[int, int] | None = None):
    """Instantiate without initialising weights (meta device), then fill from the checkpoint.

    ``prepack`` repacks linear weights for oneDNN on CPU, or, for bf16, runs them on the native
    bf16-weight kernel (every row without native bf16; the decode rows with avx512_bf16, oneDNN's
    packed copy the wider batches); torch.compile cannot lower either.
    ``quantization`` (none, int8, q4) swaps linears for weight-only quantized ones; a GGUF source
    keeps its Q4/Q8 tensors as shipped. ``shipped`` (what MSTAR_QUANTIZATION=auto resolves to
    for a model that ships quantized, ``loading.shipped``) reads the built-in model's GGUF too,
    quantizes nothing more, and where bf16 is native gives each quantized layer oneDNN's bf16
    copy for wide batches. ``cache_dir`` holds the native kernels' build and a GGUF's
    tensors after their first read.
    ``parallel`` (tensor parallelism over more than one rank) builds this rank's shard and loads
    only its slices (``mstar.models.families.parallel``).
    ``lora_slots`` (max adapters, max rank): wrap the projections in LoRA-capable linears
    (``mstar.models.lora``) before they are quantized or packed.
    """
    start = time.perf_counter()
    cls = get_model_class(config)
    sharded = parallel is not None and parallel.size > 1
    source = gguf_source(model_dir, quantization)
    if sharded and (quantization != "none" or source is not None):
        raise ValueError(f"tensor_parallel_size={parallel.size} needs an unquantized safetensors "
                         f"checkpoint (quantization={quantization!r}"
                         f"{', a GGUF source' if source is not None else ''})")
    with torch.device("meta"):
        model = build_sharded(cls, config, parallel) if sharded else cls(config)
    model.to_empty(device=device)
    model.to(dtype)
    if model.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    quantized = {}
    if source is None:
        load_weights(model, model_dir)
    else:
        quantized = load_gguf_weights(model, source, cache_dir)
    if lora_slots is not None:
        if source is not None:
            raise ValueError("LoRA adapters need a safetensors checkpoint, not a GGUF source")
        wrap_lora_linears(model, *lora_slots)
    if quantization in QUANT_MODES:
        quantized |= quantize_dense(model, quantization, skip=set(quantized))
    # Computed in float32, stored in the model dtype, as transformers does.
    model.model.rotary_emb.init_cache(device, dtype)
    if hasattr(model, "init_buffers"):  # non-persistent buffers of e.g. a vision tower
        model.init_buffers(device)
    model.eval().requires_grad_(False)
    if quantized:
        install_quantized(model, quantized, device.type == "cpu" and native_kernels(cache_dir),
                          copy=quantization == SHIPPED and native_bf16())
    if prepack and runs_bf16_kernel(device, dtype) and native_kernels(cache_dir):
        use_bf16_kernel(model)
    elif prepack and can_pack(device, dtype):
        pack_linears(model)
    if device.type == "cpu" and native_kernels(cache_dir) and native_ops_usable(device):
        use_native_ops(model)
    log.info("model_loaded", path=str(model_dir), arch=cls.__name__,
             seconds=round(time.perf_counter() - start, 2))
    return model


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The shards named by ``model.safetensors.index.json`` if present, else every
    ``*.safetensors`` (a directory may also hold other exports, e.g. a consolidated file)."""
    index = Path(model_dir) / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [Path(model_dir) / name for name in shards]
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {model_dir}")
    return files


def load_weights(model, model_dir: Path) -> None:
    files = checkpoint_files(model_dir)
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = _expected_checkpoint_names(model, params)
    handles = [safe_open(str(f), framework="pt") for f in files]
    names = [(h, n) for h in handles for n in h.keys()]  # noqa: SIM118 (not iterable)
    show = len(names) >= _PROGRESS_MIN_TENSORS or len(files) > 1
    # tqdm's default lock is a multiprocessing RLock: in a spawned worker, a named semaphore that
    # the resource tracker reports as leaked whenever the worker is killed. Bars here never cross
    # processes, so a thread lock is enough (set before the first bar, even a disabled one).
    tqdm.set_lock(threading.RLock())
    rename = getattr(model, "checkpoint_name", None)  # a layout with other names (e.g. LLaVA's)
    for handle, stored in tqdm(names, desc="loading weights", disable=not show, leave=False):
        name = rename(stored) if rename else stored
        if "rotary_emb.inv_freq" in name or name.startswith(model.unused_checkpoint_prefixes):
            continue
        if name == "lm_head.weight" and model.tie_word_embeddings:
            continue
        tensor = handle.get_tensor(stored)
        _copy(model, params, name, shard_tensor(model, name, tensor) if hasattr(model, "tp")
              else tensor)
        missing.discard(name)
    if model.tie_word_embeddings:
        missing.discard("lm_head.weight")
    if missing:
        raise ValueError(f"checkpoint in {model_dir} lacks weights for: {sorted(missing)[:5]}")


def load_gguf_weights(model, path: Path, cache_dir: Path | None = None
                      ) -> dict[str, QuantWeight]:
    """Dense tensors into the parameters; Q4/Q8 linears (fused shards stacked) returned by module.
    ``cache_dir``: where the file's tensors are kept after the first read (``read_gguf``)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    names = _expected_checkpoint_names(model, params)
    if model.tie_word_embeddings:
        names.discard("lm_head.weight")
    dense, quant = read_gguf(path, names, model.config, cache_dir)
    for name, tensor in dense.items():
        _copy(model, params, name, tensor)
    embed = quant.pop("model.embed_tokens.weight", None)
    if embed is not None and model.tie_word_embeddings:
        quant["lm_head.weight"] = embed
    elif embed is not None:  # an untied embedding is only gathered: keep it dense
        _copy(model, params, "model.embed_tokens.weight", dequantize(embed))
    shards: dict[str, list[tuple[int, str]]] = {}
    for name in quant:
        target, offset, _ = resolve_target(model, name)
        shards.setdefault(target, []).append((offset, name))
    modules = {}
    for target, parts in shards.items():
        ordered = [quant[name] for _, name in sorted(parts)]
        rows = sum(part_rows(w) for w in ordered)
        if rows == params[target].shape[0] and same_layout(ordered):
            modules[target.removesuffix(".weight")] = concat_rows(ordered)
        else:  # a fused layer with dense or differently quantized shards: load it dense
            for _, name in parts:
                _copy(model, params, name, dequantize(quant[name]))
    return modules


def _copy(model, params: dict, name: str, tensor: torch.Tensor) -> None:
    target, offset, size = resolve_target(model, name)
    if target not in params:
        raise KeyError(f"checkpoint tensor {name!r} has no matching model parameter")
    param = params[target]
    dest = param.data if size is None else param.data.narrow(0, offset, size)
    if dest.shape != tensor.shape:
        raise ValueError(f"shape mismatch for {name}: checkpoint {tuple(tensor.shape)}, "
                         f"model {tuple(dest.shape)}")
    dest.copy_(tensor)


def _expected_checkpoint_names(model, params: dict) -> set[str]:
    """Checkpoint tensor names the model needs (fused parameters expand to their shards)."""
    names = set()
    for name in params:
        shards = [s for s, (packed, _) in model.packed_modules.items()
                  if f".{packed}." in name and not _unpacked(model, name)]
        for shard in shards:
            packed = model.packed_modules[shard][0]
            names.add(name.replace(f".{packed}.", f".{shard}."))
        if not shards:
            names.add(name)
    return names


def _unpacked(model, name: str) -> bool:
    """A tensor of a module that keeps its checkpoint layout (e.g. a vision tower's q/k/v)."""
    return name.startswith(getattr(model, "unpacked_prefixes", ()))


def resolve_target(model, name: str) -> tuple[str, int, int | None]:
    """The model parameter a checkpoint tensor ``name`` fills, and its (offset, rows) there when
    it is one shard of a fused parameter (else size None). LoRA adapters map their modules so."""
    if _unpacked(model, name):
        return name, 0, None
    for shard_name, (packed, shard) in model.packed_modules.items():
        if f".{shard_name}." in name:
            offset, size = model.shard_range(packed, shard)
            return name.replace(f".{shard_name}.", f".{packed}."), offset, size
    return name, 0, None
