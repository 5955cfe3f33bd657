"""Where a model runs: the device and dtype the settings mean, and which CUDA device each rank of
each replica runs on (MSTAR_DEVICE_IDS)."""

from __future__ import annotations

from pathlib import Path

import structlog
import torch

from mstar.models.layers.cpu_bf16_linear import cpu_auto_dtype
from mstar.models.layers.cpu_linear import native_bf16
from mstar.models.loading.shipped import weights_quantization
from mstar.settings import WorkerSettings
from mstar.settings.checks.auto_precision import cpu_kv_dtype

log = structlog.get_logger(__name__)


def device_slot(replica: int, rank: int, tensor_parallel_size: int) -> int:
    """The rank's position in the device list: replica-major, so a group's ranks sit together."""
    return replica * tensor_parallel_size + rank


def device_index(device_ids: list[int] | None, num_devices: int, slot: int) -> int:
    """Entry ``slot`` of the device list (default 0 .. num_devices-1), wrapping around."""
    ids = list(device_ids) if device_ids else list(range(max(num_devices, 1)))
    return ids[slot % len(ids)]


def place_rank(settings: WorkerSettings, replica: int, rank: int) -> None:
    """Make this process's CUDA device the one the settings give the rank (nothing on CPU)."""
    if settings.device == "cpu" or not torch.cuda.is_available():
        if settings.device_ids:
            log.info("device_ids_ignored", reason="not running on CUDA", worker=replica, rank=rank)
        return
    count = torch.cuda.device_count()
    slot = device_slot(replica, rank, settings.tensor_parallel_size)
    index = device_index(settings.device_ids, count, slot)
    available = len(settings.device_ids) if settings.device_ids else count
    if slot >= available:
        log.warning("devices_shared", worker=replica, rank=rank, device=index,
                    reason=f"{slot + 1} ranks placed on {available} devices")
    if index >= count:
        raise ValueError(f"device_ids names cuda:{index}, but this host has {count} CUDA devices")
    torch.cuda.set_device(index)
    log.info("rank_placed", worker=replica, rank=rank, device=f"cuda:{index}")


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(settings: WorkerSettings) -> torch.device:
    name = settings.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def resolve_device_dtype(settings: WorkerSettings, model_dir: Path
                         ) -> tuple[torch.device, torch.dtype]:
    """The device, and the dtype MSTAR_DTYPE means for ``model_dir`` there (``auto`` on CPU
    follows the weights' quantization, ``weights_quantization``)."""
    device = resolve_device(settings)
    if settings.dtype == "auto":
        if device.type == "cuda":
            return device, torch.bfloat16
        quantized = weights_quantization(settings, model_dir, device) != "none"
        return device, cpu_auto_dtype(settings.cache_dir, quantized)
    return device, _DTYPES[settings.dtype]


def resolve_kv_dtype(settings: WorkerSettings, device: torch.device, dtype: torch.dtype,
                     quantization: str) -> torch.dtype:
    """The KV cache's dtype (MSTAR_KV_CACHE_DTYPE) under activations of ``dtype`` and linears
    quantized as ``quantization`` (``weights_quantization``'s value).

    ``auto`` halves the cache where the activations stay float32 only because the linears are
    quantized (``cpu_auto_dtype``) and the CPU has native bf16: a quantized model's weights
    already carry far more error than keys and values rounded to bf16, and at 32 streams decode
    attention read about as many bytes from a float32 cache as the layers from their q4 weights.
    Float32 models keep a float32 cache, so their parity with transformers stays exact. The
    rule is ``auto_precision.cpu_kv_dtype`` (preflight applies it too)."""
    name = settings.kv_cache_dtype
    if device.type != "cpu":
        if name != "auto":
            log.warning("kv_cache_dtype_ignored", value=name, reason="on CUDA the KV cache takes "
                        "the activations' dtype", dtype=str(dtype))
        return dtype
    kv = cpu_kv_dtype(name, str(dtype).removeprefix("torch."), quantization != "none",
                      native_bf16())
    return _DTYPES[kv]
