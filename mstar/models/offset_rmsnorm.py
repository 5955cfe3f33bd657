"""RMSNorm scaled by (1 + weight) (Gemma 3, Qwen3.5): weights are stored centred on zero."""

from __future__ import annotations

import torch
from torch import nn


class OffsetRMSNorm(nn.Module):
    """Computed in float32, scaled by (1 + weight) there, then cast back."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).to(x.dtype)
