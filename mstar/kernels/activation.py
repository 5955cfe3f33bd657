"""SiLU(gate) * up over the fused gate/up projection's output, rounding like the torch path."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024  # columns per program


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    act = (gate * tl.sigmoid(gate)).to(dtype).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (act * up).to(dtype), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [rows, 2 * n] (gate then up); returns [rows, n]."""
    rows, width = x.shape
    n = width // 2
    out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    _silu_and_mul_kernel[(rows, triton.cdiv(n, BLOCK))](x, out, n, x.stride(0), out.stride(0),
                                                        BLOCK=BLOCK)
    return out
