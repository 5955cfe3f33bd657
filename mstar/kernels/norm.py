"""RMSNorm with the residual add that precedes it, in one pass over each row.

Rounds where ``mstar.models.layers.blocks.RMSNorm`` rounds: the sum is stored in the activation dtype
(it becomes the next residual) and normalised from that stored value in float32; the normalised
row is rounded to the activation dtype before the weight multiplies it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, residual_out_ptr, n_cols, eps,
    stride_x, stride_r, stride_o, stride_ro,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * stride_ro + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    normed = (xf * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None = None):
    """x: [rows, dim]. Without ``residual``: the normalised x. With it: (norm(x + residual),
    x + residual), like ``RMSNorm(x, residual)``."""
    rows, dim = x.shape
    out = torch.empty_like(x)
    residual_out = torch.empty_like(x) if residual is not None else out
    source = residual if residual is not None else x
    _rms_norm_kernel[(rows,)](
        x, source, weight, out, residual_out, dim, eps,
        x.stride(0), source.stride(0), out.stride(0), residual_out.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(dim),
    )
    return out if residual is None else (out, residual_out)
