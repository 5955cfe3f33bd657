"""What ``auto`` means for MSTAR_QUANTIZATION, MSTAR_DTYPE and MSTAR_KV_CACHE_DTYPE on CPU.

Each rule is here once, as a function of the facts it needs: whether the model's weights ship
quantized (its files), whether the CPU runs bf16 natively (avx512_bf16, AMX) or through mstar's
bf16-weight kernel. The engine applies the rules with what torch sees (``mstar.engine.placement``,
``mstar.models.loading.shipped``, ``mstar.models.layers.cpu_bf16_linear``); preflight (``mstar
config validate --model``) with /proc/cpuinfo and the model's directory, so that the KV cache it
estimates is the one the engine allocates. No torch here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mstar.settings.schema import WorkerSettings

# MSTAR_QUANTIZATION=auto's value for a model whose weights ship quantized (docs/engine.rst,
# "Shipped precision"): its Q4/Q8 blocks as they are in the file.
SHIPPED = "shipped"
# What a converted model directory carries: a GGUF model's names its file; the built-in model's
# conversion marker names its format and source (written last).
GGUF_SOURCE_FILE = "gguf_source.json"
CONVERTED_MARKER = ".mstar-converted.json"


def serves_lora(settings: WorkerSettings) -> bool:
    """Whether the model is built with LoRA slots: adapters at start or run-time loading."""
    return bool(settings.lora_modules) or settings.allow_runtime_lora_updating


def ships_gguf(model_dir: Path) -> bool:
    """The model's weights ship as a GGUF: a GGUF model's directory, or the built-in model's
    (the built-in Whisper is converted from CTranslate2's model.bin: not a GGUF's weights)."""
    if (Path(model_dir) / GGUF_SOURCE_FILE).is_file():
        return True
    marker = Path(model_dir) / CONVERTED_MARKER
    if not marker.is_file():
        return False
    return str(json.loads(marker.read_text(encoding="utf-8")).get("source", "")).endswith(".gguf")


def quantization(settings: WorkerSettings, device: str, ships_quantized: bool) -> str:
    """MSTAR_QUANTIZATION on ``device`` ("cpu", "cuda"): none, int8 and q4 as set; ``auto`` is
    SHIPPED for a model whose weights ship quantized when the run can serve them so (CPU, the
    auto dtype, no tensor parallelism, no LoRA: see ``mstar.models.loading.shipped``), else
    none."""
    if settings.quantization != "auto":
        return settings.quantization
    servable = (device == "cpu" and settings.dtype == "auto"
                and settings.tensor_parallel_size == 1 and not serves_lora(settings))
    return SHIPPED if servable and ships_quantized else "none"


def cpu_auto_dtype(quantized: bool, runs_bf16: Callable[[], bool]) -> str:
    """MSTAR_DTYPE=auto on CPU: float32 under quantized linears (their kernels take float32
    activations); else bfloat16 where the CPU runs it (``runs_bf16``: natively, or through the
    bf16-weight kernel on AVX2 + FMA; asked only when needed, as it may build the kernels), else
    float32."""
    if quantized:
        return "float32"
    return "bfloat16" if runs_bf16() else "float32"


def cpu_kv_dtype(knob: str, dtype: str, quantized: bool, native_bf16: bool) -> str:
    """MSTAR_KV_CACHE_DTYPE on CPU under activations of ``dtype``: ``auto`` halves the cache
    (bfloat16) where the activations stay float32 only because the linears are quantized and the
    CPU has native bf16, else keeps ``dtype``; bfloat16 under any activations; float32 only under
    float32 ones (ValueError otherwise)."""
    if knob == "auto":
        return "bfloat16" if dtype == "float32" and quantized and native_bf16 else dtype
    if knob not in (dtype, "bfloat16"):
        raise ValueError(f"MSTAR_KV_CACHE_DTYPE={knob} needs activations of that dtype; "
                         f"MSTAR_DTYPE resolved to {dtype}")
    return knob
