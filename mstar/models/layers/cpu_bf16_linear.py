"""mstar's bf16 linear layers: every row on CPUs without native bf16 (AVX2), the decode rows on
CPUs with avx512_bf16.

Without native bf16 (AVX2):
On such a CPU torch emulates bf16 matmuls, several times slower than float32 at batch, and oneDNN
cannot prepack bf16. The native kernel (``torch.ops.mstar_cpu.bf16_linear``,
kernels/cpu/csrc/bf16_linear.h) reads the bf16 weights (half the bytes of float32: decode streams them
from memory), widens them to float32 in registers and runs float32 FMAs, so a bf16 model there
reads half the memory of a float32 one and computes like one. Activations between the layers stay
bf16, as on a CPU with native bf16; each layer's sums are float32, rounded to bf16 once.

With avx512_bf16 (and oneDNN), bf16 activations run the same op on vdpbf16ps (csrc/bf16_dot.h):
up to DOT_ROWS rows (decode) it streams the weights faster than oneDNN's packed linear, which
keeps the wider batches (prefill, many streams) on its own packed copy of the weight. So such a
model holds its linears' weights twice (the tied LM head reads the embedding, plus oneDNN's copy).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from mstar.kernels.cpu.build import native_kernels
from mstar.models.layers.cpu_linear import native_bf16, pack_weight, packed_linear, replace_linears
from mstar.settings.checks import auto_precision

# Rows of x up to which a bf16 linear runs mstar's kernel on a CPU with avx512_bf16; more rows run
# oneDNN's packed linear. Measured per linear of the built-in model against oneDNN, best of
# rounds, 2 threads (docs/engine.rst, "The bf16 decode kernel").
DOT_ROWS = 8


class Bf16Linear(nn.Module):
    """``nn.Linear`` with a bf16 weight run by the native kernel; shares the layer's parameters
    (a tied LM head keeps reading the embedding's rows). ``level`` forces a SIMD level (tests).
    ``wide``: rows beyond DOT_ROWS run oneDNN's packed copy of the weight (native bf16)."""

    def __init__(self, linear: nn.Linear, level: int = -1, wide: bool = False) -> None:
        super().__init__()
        if linear.weight.dtype != torch.bfloat16 or not linear.weight.is_contiguous():
            raise ValueError("Bf16Linear needs a contiguous bfloat16 weight")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.level = level
        # A plain attribute, not a buffer: a decode step streams ``weight``, a wide batch this
        # copy, never both (benchmark/roofline_weights.py counts what a decode step streams).
        self.wide = pack_weight(linear.weight) if wide else None
        # The most rows the kernel takes (None: any), what the one-call decode stack may pass.
        self.kernel_rows = DOT_ROWS if wide else None

    def on_kernel(self, rows: int) -> bool:
        """``rows`` rows of x run mstar's kernel, not oneDNN's packed copy."""
        return self.kernel_rows is None or rows <= self.kernel_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if self.on_kernel(flat.shape[0]):
            out = torch.ops.mstar_cpu.bf16_linear(flat, self.weight, self.bias, self.level)
        else:
            out = packed_linear(flat, self.wide, self.bias)
        return out.view(*x.shape[:-1], self.out_features)


def use_bf16_kernel(model: nn.Module, level: int = -1) -> int:
    """Swap every bf16 nn.Linear for a Bf16Linear (with oneDNN's copy for wide batches where
    bf16 is native); returns how many were swapped."""
    wide = native_bf16()
    return replace_linears(model, lambda linear: Bf16Linear(linear, level, wide),
                           keep=lambda linear: linear.weight.dtype != torch.bfloat16)


def runs_bf16_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """A bf16 model on this CPU runs its linears on mstar's bf16 kernel: every row with AVX2 and
    FMA and no native bf16 (float32 FMA), the decode rows with avx512_bf16 (vdpbf16ps; oneDNN
    the wider batches). AMX without avx512_bf16 would keep oneDNN alone (no such CPU is sold)."""
    avx2 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
    dot = torch.cpu._is_avx512_bf16_supported()
    return device.type == "cpu" and dtype == torch.bfloat16 and avx2 and (dot or not native_bf16())


def cpu_auto_dtype(cache_dir: Path, quantized: bool = False) -> torch.dtype:
    """The dtype MSTAR_DTYPE=auto means on CPU: bf16 where it is native (oneDNN), or where the
    bf16-weight kernel runs (AVX2 + FMA, and the native kernels build in ``cache_dir``); else
    float32. Served side by side on an AVX2 CPU, bf16 through the kernel gave 1.63x float32's
    tok/s at c=1, 1.15x at c=8 and 1.00x at c=32 (docs/engine.rst).

    With quantized weights (int8, q4) float32, on every CPU: their kernels take float32
    activations, so bf16 ones only add conversions around every linear and keep the one-call
    decode stack from running. The built-in model offline, bf16 activations against float32: on
    AVX2, q4 at one stream 37 against 51 tok/s; on avx512_bf16, q4 0.66x at c=1 and 0.93x at
    c=32, int8 0.70x and 0.92x (``benchmark.quant_activations``, docs/engine.rst).

    The rule is ``auto_precision.cpu_auto_dtype`` (preflight applies it too); the facts are
    torch's, and the kernels are built only when the answer needs them."""
    def runs_bf16() -> bool:
        return native_bf16() or (runs_bf16_kernel(torch.device("cpu"), torch.bfloat16)
                                 and native_kernels(cache_dir))

    return getattr(torch, auto_precision.cpu_auto_dtype(quantized, runs_bf16))
