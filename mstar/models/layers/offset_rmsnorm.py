"""RMSNorm scaled by (1 + weight) (Gemma 3, Qwen3.5): weights are stored centred on zero."""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.layers import fused_ops


class OffsetRMSNorm(nn.Module):
    """Computed in float32, scaled by (1 + weight) there, then cast back."""

    native_ops = False  # one native call (mstar.models.layers.fused_ops)

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native_ops:
            return fused_ops.rms_norm(x, self.weight, self.eps, True)
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).to(x.dtype)

    def normalize_(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes x in place (e.g. the q heads inside a qkv output) and returns it."""
        if self.native_ops:
            return fused_ops.rms_norm_(x, self.weight, self.eps, True)
        return x.copy_(self(x))
