"""Writes the step's new K/V into the paged cache; a negative slot (a padding row) is skipped."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, cache_ptr, slots_ptr,
    stride_kt, stride_kh, stride_vt, stride_vh, stride_ckv, stride_ch, stride_cb, stride_cs,
    NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slots_ptr + token)
    if slot >= 0:
        h = tl.arange(0, BLOCK_H)
        d = tl.arange(0, BLOCK_D)
        mask = (h < NUM_KV_HEADS)[:, None] & (d < HEAD_DIM)[None, :]
        dst = (h[:, None].to(tl.int64) * stride_ch + (slot // BLOCK_SIZE).to(tl.int64) * stride_cb
               + (slot % BLOCK_SIZE) * stride_cs + d[None, :])
        k = tl.load(k_ptr + token * stride_kt + h[:, None] * stride_kh + d[None, :], mask=mask)
        v = tl.load(v_ptr + token * stride_vt + h[:, None] * stride_vh + d[None, :], mask=mask)
        tl.store(cache_ptr + dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
        tl.store(cache_ptr + stride_ckv + dst, v.to(cache_ptr.dtype.element_ty), mask=mask)


def store_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """k, v: [tokens, kv_heads, head_dim]; token t goes to flat cache slot ``slot_mapping[t]``."""
    num_tokens, num_kv_heads, head_dim = k.shape
    _store_kv_kernel[(num_tokens,)](
        k, v, kv_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3),
        NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim, BLOCK_SIZE=kv_cache.shape[3],
        BLOCK_H=triton.next_power_of_2(num_kv_heads), BLOCK_D=triton.next_power_of_2(head_dim),
    )
