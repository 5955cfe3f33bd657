"""Building blocks shared by the decoder models."""

from __future__ import annotations

import math

import torch
from torch import nn

from mstar.models.layers import fused_ops


class RMSNorm(nn.Module):
    """RMSNorm computed in float32; optionally fuses the residual add that precedes it.

    With ``native_ops`` (``fused_ops.use_native_ops``) one native call does the work, and the
    fused add writes its results into ``x`` and ``residual``: callers pass tensors they own.
    """

    native_ops = False

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused kernel, same result as the steps below
            return nn.functional.rms_norm(x, self.weight.shape, self.weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        if self.native_ops:
            if residual is None:
                return fused_ops.rms_norm(x, self.weight, self.eps, False)
            return fused_ops.add_rms_norm_(x, residual, self.weight, self.eps, False)
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x

    def normalize_(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes x in place (e.g. the q heads inside a qkv output) and returns it."""
        if self.native_ops:
            return fused_ops.rms_norm_(x, self.weight, self.eps, False)
        return x.copy_(self._norm(x))


def rope_inv_freq(head_dim: int, rope: dict) -> torch.Tensor:
    """Inverse frequencies for the rope types we support (default, linear and llama3)."""
    theta = float(rope.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / rope["factor"]
    if rope_type == "llama3":
        factor = rope["factor"]
        low, high = rope["low_freq_factor"], rope["high_freq_factor"]
        old_len = rope["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(
        f"unsupported rope_scaling type {rope_type!r}: mstar supports 'default', 'linear' "
        "and 'llama3'"
    )


def rope_parameters(config) -> dict:
    """Rope settings from either the new ``rope_parameters`` or legacy ``rope_scaling`` fields."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    legacy = getattr(config, "rope_scaling", None)
    if legacy and not params:
        params = dict(legacy)
    params.setdefault("rope_theta", getattr(config, "rope_theta", None) or 10000.0)
    return params


class RotaryEmbedding(nn.Module):
    """Precomputed cos/sin table indexed by absolute position (non-interleaved halves)."""

    def __init__(self, head_dim: int, max_positions: int, rope: dict) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_positions = max_positions
        self.rope = rope
        self.register_buffer("cos_sin", torch.empty(0), persistent=False)

    def init_cache(self, device: torch.device, dtype: torch.dtype) -> None:
        inv_freq = rope_inv_freq(self.head_dim, self.rope)
        t = torch.arange(self.max_positions, dtype=torch.int64).float()
        freqs = torch.outer(t, inv_freq)
        cos, sin = freqs.cos(), freqs.sin()
        # Full-width cos and sign-folded sin: rope becomes x*cos + swap_halves(x)*sin.
        table = torch.cat([cos, cos, -sin, sin], dim=-1)
        self.cos_sin = table.to(device=device, dtype=dtype)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
        return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Non-interleaved rope (HF's rotate_half convention), x: [tokens, heads, head_dim]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([x2, x1], dim=-1) * sin


class SiluAndMul(nn.Module):
    native_ops = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native_ops:
            return fused_ops.silu_and_mul(x)
        gate, up = x.chunk(2, dim=-1)
        return nn.functional.silu(gate) * up
