"""Rotary position embedding (HF's non-interleaved halves) straight from the position table.

Reads ``RotaryEmbedding.cos_sin`` ([positions, 2 * head_dim]: cos twice, then -sin and sin), so
the per-token cos/sin gather and the rotate-half copy of the torch path become one kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rope_kernel(
    x_ptr, out_ptr, positions_ptr, table_ptr, stride_xt, stride_xh, stride_ot, stride_oh,
    stride_table, NUM_HEADS: tl.constexpr, HALF: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0)
    pos = tl.load(positions_ptr + token)
    h = tl.arange(0, BLOCK_H)
    i = tl.arange(0, BLOCK_HALF)
    mask = (h < NUM_HEADS)[:, None] & (i < HALF)[None, :]
    row = table_ptr + pos * stride_table
    cos = tl.load(row + i, mask=i < HALF, other=0.0).to(tl.float32)[None, :]
    sin = tl.load(row + 3 * HALF + i, mask=i < HALF, other=0.0).to(tl.float32)[None, :]
    x_off = token * stride_xt + h[:, None] * stride_xh + i[None, :]
    x1 = tl.load(x_ptr + x_off, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + x_off + HALF, mask=mask, other=0.0).to(tl.float32)
    o_off = token * stride_ot + h[:, None] * stride_oh + i[None, :]
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + o_off, (x1 * cos - x2 * sin).to(dtype), mask=mask)
    tl.store(out_ptr + o_off + HALF, (x2 * cos + x1 * sin).to(dtype), mask=mask)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim] (last dim contiguous); returns the rotated copy."""
    num_tokens, num_heads, head_dim = x.shape
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    half = head_dim // 2
    _rope_kernel[(num_tokens,)](
        x, out, positions, cos_sin, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        cos_sin.stride(0), NUM_HEADS=num_heads, HALF=half,
        BLOCK_H=triton.next_power_of_2(num_heads), BLOCK_HALF=triton.next_power_of_2(half),
    )
    return out
