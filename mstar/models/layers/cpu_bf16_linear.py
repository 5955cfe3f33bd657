"""bf16 linear layers for CPUs without native bf16 (AVX2): bf16 weights, float32 arithmetic.

On such a CPU torch emulates bf16 matmuls, several times slower than float32 at batch, and oneDNN
cannot prepack bf16. The native kernel (``torch.ops.mstar_cpu.bf16_linear``,
kernels/cpu/csrc/bf16_linear.h) reads the bf16 weights (half the bytes of float32: decode streams them
from memory), widens them to float32 in registers and runs float32 FMAs, so a bf16 model there
reads half the memory of a float32 one and computes like one. Activations between the layers stay
bf16, as on a CPU with native bf16; each layer's sums are float32, rounded to bf16 once.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from mstar.kernels.cpu.build import native_kernels
from mstar.models.layers.cpu_linear import native_bf16, replace_linears


class Bf16Linear(nn.Module):
    """``nn.Linear`` with a bf16 weight run by the native kernel; shares the layer's parameters
    (a tied LM head keeps reading the embedding's rows). ``level`` forces a SIMD level (tests)."""

    def __init__(self, linear: nn.Linear, level: int = -1) -> None:
        super().__init__()
        if linear.weight.dtype != torch.bfloat16 or not linear.weight.is_contiguous():
            raise ValueError("Bf16Linear needs a contiguous bfloat16 weight")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.level = level

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.ops.mstar_cpu.bf16_linear(flat, self.weight, self.bias, self.level)
        return out.view(*x.shape[:-1], self.out_features)


def use_bf16_kernel(model: nn.Module, level: int = -1) -> int:
    """Swap every bf16 nn.Linear for a Bf16Linear; returns how many were swapped."""
    return replace_linears(model, lambda linear: Bf16Linear(linear, level),
                           keep=lambda linear: linear.weight.dtype != torch.bfloat16)


def runs_bf16_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """A bf16 model on this CPU runs its linears on the bf16-weight kernel: AVX2 and FMA, no
    native bf16 (which oneDNN runs faster)."""
    avx2 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    return device.type == "cpu" and dtype == torch.bfloat16 and avx2 and not native_bf16()


def cpu_auto_dtype(cache_dir: Path, quantized: bool = False) -> torch.dtype:
    """The dtype MSTAR_DTYPE=auto means on CPU: bf16 where it is native (oneDNN), or where the
    bf16-weight kernel runs (AVX2 + FMA, and the native kernels build in ``cache_dir``); else
    float32. Served side by side on an AVX2 CPU, bf16 through the kernel gave 1.63x float32's
    tok/s at c=1, 1.15x at c=8 and 1.00x at c=32 (docs/engine.rst).

    With quantized weights (int8, q4) the kernel is not used, and without native bf16 the bf16
    activations only add conversions around the norms, rope and attention: float32 then (the q4
    built-in model offline at one stream, AVX2: 51 tok/s against 37 with bf16 activations)."""
    if native_bf16():
        return torch.bfloat16
    if quantized:
        return torch.float32
    if runs_bf16_kernel(torch.device("cpu"), torch.bfloat16) and native_kernels(cache_dir):
        return torch.bfloat16
    return torch.float32
