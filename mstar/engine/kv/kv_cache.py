"""Sizing and allocation of the paged KV cache."""

from __future__ import annotations

import structlog
import torch

from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def block_bytes(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                dtype: torch.dtype) -> int:
    elem = torch.empty(0, dtype=dtype).element_size()
    return 2 * num_layers * block_size * num_kv_heads * head_dim * elem


def attention_layers(model) -> list:
    """The layers that keep K/V in the paged cache (hybrid models also have recurrent ones)."""
    return [layer.self_attn for layer in model.model.layers if hasattr(layer, "self_attn")]


def memory_budget(settings: WorkerSettings, device: torch.device) -> float:
    """Bytes the caches (KV, and recurrent state for hybrid models) may use together."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free * settings.kv_cache_memory_fraction
    return settings.cpu_kv_cache_gb * (1 << 30)


def num_blocks_for(settings: WorkerSettings, bytes_per_block: int, max_model_len: int, budget: float) -> int:
    """Explicit ``num_kv_blocks``, else ``budget``, capped at what the seq cap can use."""
    if settings.num_kv_blocks is not None:
        return settings.num_kv_blocks
    blocks_per_seq = -(-max_model_len // settings.kv_block_size)
    num = min(int(budget // bytes_per_block), settings.max_num_seqs * blocks_per_seq)
    if num < 1:
        raise ValueError(
            f"KV cache budget too small: one block needs {bytes_per_block} bytes, budget is "
            f"{int(budget)} bytes (raise cpu_kv_cache_gb / kv_cache_memory_fraction)"
        )
    return num


def allocate_kv_cache(model, backend, num_blocks: int, block_size: int, device: torch.device,
                      dtype: torch.dtype) -> torch.Tensor:
    """One zeroed tensor [layers, *backend layout]; each attention layer gets its slice.

    Zeroed because padded key slots are masked, and a masked NaN would still poison SDPA.
    """
    layers = attention_layers(model)
    attn = layers[0]
    shape = backend.kv_cache_shape(num_blocks, block_size, attn.num_kv_heads, attn.head_dim)
    cache = torch.zeros(len(layers), *shape, device=device, dtype=dtype)
    for i, layer in enumerate(layers):
        layer.kv_cache = cache[i]
    log.info("kv_cache_allocated", num_blocks=num_blocks, block_size=block_size,
             gib=round(cache.numel() * cache.element_size() / (1 << 30), 3))
    return cache
