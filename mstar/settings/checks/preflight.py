"""Model-aware preflight (``mstar config validate --model PATH|builtin``): the settings checked
against the model's config.json, with no weights and no torch.

Checks: max_model_len against the model's limit; the KV cache for max_num_seqs full sequences
against the memory budget; max_num_batched_tokens against max_model_len; the dtype against the
device; tensor_parallel_size against the attention heads (``mstar serve`` runs this one itself,
before anything spawns). Each finding is a ``Problem`` (an ``error`` when serving would fail or
run the model past what it supports), so ``validate`` prints them with the settings' own
problems, all at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mstar.settings.checks.auto_precision import (
    cpu_auto_dtype,
    cpu_kv_dtype,
    quantization,
    ships_gguf,
)
from mstar.settings.checks.image_budget import max_image_tokens
from mstar.settings.checks.lora_checks import lora_problems
from mstar.settings.checks.speculative_checks import speculation_off_reason
from mstar.settings.env_file import SettingsUsageError
from mstar.settings.schema import BUILTIN_MODEL, WorkerSettings
from mstar.settings.sources import Problem

BUILTIN_ALIASES = ("builtin", BUILTIN_MODEL)
_LIMIT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
_KV_LAYER_TYPES = ("full_attention", "sliding_attention")
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_GIB = 1 << 30


@dataclass(frozen=True)
class ModelShape:
    """What preflight needs from config.json."""

    source: str            # the config.json path, named in every finding
    limit: int | None      # longest sequence the model supports
    kv_layers: int         # layers that keep K/V in the paged cache
    kv_heads: int
    head_dim: int
    heads: int = 0         # attention (query) heads
    image_tokens: int | None = None  # of the largest allowed image; None: a text-only model
    ships_quantized: bool = False  # its weights ship as a GGUF (``auto_precision.ships_gguf``)

    def kv_bytes_per_token(self, dtype: str) -> int:
        return 2 * self.kv_layers * self.kv_heads * self.head_dim * _DTYPE_BYTES[dtype]


def config_path(model: str, settings: WorkerSettings) -> Path:
    if model in BUILTIN_ALIASES:
        converted = Path(settings.cache_dir).expanduser() / "models" / BUILTIN_MODEL
        if not (converted / "config.json").is_file():
            raise SettingsUsageError(f"the built-in model is not converted yet (no {converted}/"
                                     "config.json); run `mstar serve` once")
        return converted / "config.json"
    path = Path(model).expanduser()
    return path / "config.json" if path.is_dir() else path


def read_shape(path: Path, max_pixels: int = WorkerSettings().max_image_pixels) -> ModelShape:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SettingsUsageError(f"cannot read the model's config {str(path)!r}: {exc}") from None
    if not isinstance(config, dict):
        raise SettingsUsageError(f"{str(path)!r} is not a JSON object")
    text = _text_config(config)
    heads = _int(text, "num_attention_heads", path)
    layer_types = text.get("layer_types")
    layers = (sum(t in _KV_LAYER_TYPES for t in layer_types) if isinstance(layer_types, list)
              else _int(text, "num_hidden_layers", path))
    limit = next((text[k] for k in _LIMIT_KEYS if isinstance(text.get(k), int)), None)
    head_dim = text.get("head_dim") or _int(text, "hidden_size", path) // heads
    return ModelShape(str(path), limit, layers, int(text.get("num_key_value_heads") or heads),
                      int(head_dim), heads, max_image_tokens(config, path, max_pixels),
                      ships_gguf(path.parent))


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of config.json: its ``text_config`` (vision and audio
    models), Qwen3-Omni's thinker's (``thinker_config.text_config``: the one the engine runs),
    else the config itself."""
    thinker = config.get("thinker_config")
    if isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        return thinker["text_config"]
    return config.get("text_config") if isinstance(config.get("text_config"), dict) else config


def _int(config: dict[str, Any], key: str, path: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or value <= 0:
        raise SettingsUsageError(f"{str(path)!r} has no positive integer {key!r}")
    return value


def gpu_visible() -> bool:
    """An NVIDIA GPU and driver are visible (what torch.cuda.is_available needs, without torch)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def _cpu_flags() -> set[str]:
    try:
        return set(Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return set()


def cpu_has_native_bf16() -> bool:
    return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())


def cpu_runs_bf16() -> bool:
    """bf16 is not emulated on this CPU: native (avx512_bf16, AMX), or AVX2 + FMA for mstar's
    bf16-weight kernel (float32 arithmetic on bf16 weights; mstar/models/layers/cpu_bf16_linear.py)."""
    return cpu_has_native_bf16() or {"avx2", "fma", "f16c"} <= _cpu_flags()


@dataclass(frozen=True)
class Precision:
    """The device, activation dtype and KV cache dtype a run resolves to (``auto_precision``'s
    rules, with this machine's CPU flags: the engine applies them with torch's view of it)."""

    device: str
    dtype: str
    kv_dtype: str
    kv_refused: str | None = None  # why the engine would refuse MSTAR_KV_CACHE_DTYPE (kv_dtype
    # is then the activations')


def resolved_precision(settings: WorkerSettings, shape: ModelShape) -> Precision:
    """What ``auto`` would resolve to for this model here, as the engine resolves it."""
    device = settings.device if settings.device != "auto" else (
        "cuda" if gpu_visible() else "cpu")
    quantized = quantization(settings, device, shape.ships_quantized) != "none"
    dtype = settings.dtype
    if dtype == "auto":  # the engine also needs the native kernels to build for the bf16 kernel
        dtype = "bfloat16" if device == "cuda" else cpu_auto_dtype(quantized, cpu_runs_bf16)
    if device != "cpu":
        return Precision(device, dtype, dtype)
    try:
        kv_dtype = cpu_kv_dtype(settings.kv_cache_dtype, dtype, quantized, cpu_has_native_bf16())
    except ValueError as exc:
        return Precision(device, dtype, dtype, str(exc))
    return Precision(device, dtype, kv_dtype)


def preflight(settings: WorkerSettings, shape: ModelShape) -> list[Problem]:
    """Every problem of these settings with this model, at once."""
    precision = resolved_precision(settings, shape)
    problems = (check_model_len(settings, shape)
                + check_device(settings, precision.device, precision.dtype))
    if precision.kv_refused is not None:
        problems.append(_problem("MSTAR_KV_CACHE_DTYPE", precision.kv_refused, shape, error=True))
    problems += check_tensor_parallel(settings, shape)
    problems += check_speculative(settings, shape)
    problems += check_lora(settings, shape)
    max_len = settings.max_model_len or shape.limit
    if max_len is not None:
        problems += check_kv_budget(settings, shape, precision.device, precision.kv_dtype,
                                    max_len)
        problems += check_batch_budget(settings, shape, max_len)
        problems += check_image_fits(settings, shape, max_len)
    return problems


def _problem(env: str, reason: str, shape: ModelShape, error: bool) -> Problem:
    return Problem(env, reason, f"preflight ({shape.source})", error=error)


def check_model_len(settings: WorkerSettings, shape: ModelShape) -> list[Problem]:
    if shape.limit is None:
        return [_problem("MSTAR_MAX_MODEL_LEN", "the model's config names no length limit "
                         f"({', '.join(_LIMIT_KEYS)}); set MSTAR_MAX_MODEL_LEN", shape,
                         error=settings.max_model_len is None)]
    if settings.max_model_len is not None and settings.max_model_len > shape.limit:
        return [_problem("MSTAR_MAX_MODEL_LEN", f"{settings.max_model_len} exceeds the model's "
                         f"limit of {shape.limit} tokens", shape, error=True)]
    return []


def check_kv_budget(settings: WorkerSettings, shape: ModelShape, device: str, kv_dtype: str,
                    max_len: int) -> list[Problem]:
    """The KV cache (of ``kv_dtype``) against max_num_seqs full sequences of ``max_len``."""
    per_token = shape.kv_bytes_per_token(kv_dtype)
    block = settings.kv_block_size
    if settings.num_kv_blocks is not None:
        capacity, env = settings.num_kv_blocks * block, "MSTAR_NUM_KV_BLOCKS"
    elif device == "cpu":
        budget = settings.cpu_kv_cache_gb * _GIB
        capacity, env = int(budget // (per_token * block)) * block, "MSTAR_CPU_KV_CACHE_GB"
    else:
        return []  # sized from free GPU memory at start: not known without the device
    seqs = settings.max_num_seqs
    if capacity < max_len:
        return [_problem(env, f"the KV cache holds {capacity} tokens, less than one sequence of "
                         f"max_model_len={max_len} ({per_token} bytes per token in "
                         f"{kv_dtype})",
                         shape, error=True)]
    if capacity < seqs * max_len:
        need = seqs * max_len * per_token / _GIB
        return [_problem(env, f"max_num_seqs={seqs} full sequences of {max_len} tokens need "
                         f"{need:.1f} GiB of KV cache; it holds {capacity} tokens "
                         f"({capacity // max_len} full sequences): long requests will be "
                         "preempted under full load", shape, error=False)]
    return []


def check_batch_budget(settings: WorkerSettings, shape: ModelShape, max_len: int) -> list[Problem]:
    if settings.max_num_batched_tokens < settings.max_num_seqs:
        return [_problem("MSTAR_MAX_NUM_BATCHED_TOKENS", f"{settings.max_num_batched_tokens} is "
                         f"below max_num_seqs={settings.max_num_seqs}: a full batch cannot "
                         "decode in one step", shape, error=False)]
    if settings.max_num_batched_tokens < max_len:
        return [_problem("MSTAR_MAX_NUM_BATCHED_TOKENS", f"{settings.max_num_batched_tokens} is "
                         f"below max_model_len={max_len}: longer prompts are prefilled in chunks "
                         "over several steps", shape, error=False)]
    return []


def check_tensor_parallel(settings: WorkerSettings, shape: ModelShape) -> list[Problem]:
    """The heads split evenly between the ranks (KV heads: one count must divide the other)."""
    size = settings.tensor_parallel_size
    if size == 1:
        return []
    if shape.heads % size:
        reason = f"{size} does not divide the model's {shape.heads} attention heads"
    elif shape.kv_heads % size and size % shape.kv_heads:
        reason = (f"{size} and the model's {shape.kv_heads} KV heads: one must divide the other")
    else:
        return []
    return [_problem("MSTAR_TENSOR_PARALLEL_SIZE", reason, shape, error=True)]


def tensor_parallel_problem(settings: WorkerSettings, model_dir: Path) -> str | None:
    """The one-line reason ``mstar serve`` must not start with this tensor-parallel size, or None
    (also when the model has no config.json to tell: the workers then check)."""
    path = model_dir / "config.json"
    if settings.tensor_parallel_size == 1 or not path.is_file():
        return None
    try:
        problems = check_tensor_parallel(settings, read_shape(path))
    except SettingsUsageError:
        return None  # the loader names what is wrong with the config
    return problems[0].message() if problems else None
def check_image_fits(settings: WorkerSettings, shape: ModelShape, max_len: int) -> list[Problem]:
    if shape.image_tokens is None or settings.max_images_per_request == 0:
        return []
    if shape.image_tokens >= max_len:
        return [_problem("MSTAR_MAX_MODEL_LEN", f"{max_len} tokens cannot hold one image at the "
                         f"largest allowed size ({shape.image_tokens} tokens at "
                         f"MSTAR_MAX_IMAGE_PIXELS={settings.max_image_pixels}): every request "
                         "with such an image is refused", shape, error=True)]
    return []


def check_device(settings: WorkerSettings, device: str, dtype: str) -> list[Problem]:
    here = ModelShape("this machine", None, 0, 0, 0)
    if device == "cuda" and not gpu_visible():
        return [_problem("MSTAR_DEVICE", "cuda is asked for but no NVIDIA GPU is visible",
                         here, error=True)]
    if device == "cpu" and dtype == "float16":
        return [_problem("MSTAR_DTYPE", "float16 on CPU is slow and loses precision; use "
                         "float32 or bfloat16", here, error=False)]
    if device == "cpu" and dtype == "bfloat16" and not cpu_runs_bf16():
        return [_problem("MSTAR_DTYPE", "bfloat16 on a CPU without AVX2 or native bf16 is "
                         "emulated and slow; use float32", here, error=False)]
    return []


def check_speculative(settings: WorkerSettings, shape: ModelShape) -> list[Problem]:
    reason = speculation_off_reason(settings, Path(shape.source))
    return [] if reason is None else [_problem("MSTAR_SPECULATIVE_METHOD", reason, shape,
                                               error=False)]


def check_lora(settings: WorkerSettings, shape: ModelShape) -> list[Problem]:
    """The configured LoRA adapters against the base model (``lora_checks``): errors."""
    if not settings.lora_modules:
        return []
    config = json.loads(Path(shape.source).read_text(encoding="utf-8"))
    return [_problem("MSTAR_LORA_MODULES", reason, shape, error=True)
            for reason in lora_problems(settings, config)]
