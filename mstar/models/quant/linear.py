"""Weight-only quantized layers: linears that run the native kernels, and the tied embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mstar.models.quant.formats import (
    Q4Weight,
    QuantWeight,
    dequantize,
    interleave_q4,
    round_activations,
    select_rows,
)

# How a QuantLinear computes: the C++ integer-dot kernels (q4 weights repacked once into their
# interleaved layout, which replaces the Q4_1 rows); the same arithmetic in torch (where the
# kernels cannot build); or float32 activations times the dequantized weights (tests use it to
# compare the weights with transformers' exactly).
MODES = ("native", "reference", "exact")
# Batch rows from which the weight is dequantized a cache-sized tile at a time and multiplied with
# the activations by a GEMM (csrc/dequant_gemm.h; the reference mode then skips the int16 rounding
# too). This is the float32 tiles' limit (kWideRowsF32 there): the integer-dot panels beat them at
# every shape measured from 64 to 512 rows on AVX2 (benchmark/cpu_kernels.py, docs/engine.rst), so
# only long prefill chunks take them. The native kernels' limit is their level's
# (``torch.ops.mstar_cpu.quant_wide_rows(q4)``: fewer rows where the tiles are bf16, avx512_bf16).
WIDE_BATCH = 512


class QuantLinear(nn.Module):
    """y = round_activations(x) @ dequantize(W)^T + b (x unrounded from ``wide_rows`` rows; bf16
    rounded there on a level with avx512_bf16), in float32, returned in x's dtype."""

    def __init__(self, weight: QuantWeight, bias: torch.Tensor | None, mode: str) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown QuantLinear mode {mode!r}; expected one of {MODES}")
        if isinstance(weight, Q4Weight) and mode == "native":
            weight = interleave_q4(weight)
        self.qweight = weight
        self.mode = mode
        # rows from which forward takes the wide path: the native kernels' level decides, once
        q4 = isinstance(weight, Q4Weight)
        self.wide_rows = torch.ops.mstar_cpu.quant_wide_rows(q4) if mode == "native" else WIDE_BATCH
        if isinstance(weight, Q4Weight):
            self.in_features, self.out_features = weight.in_features, weight.blocks.shape[0]
        else:
            self.out_features, self.in_features = weight.weight.shape
        self.register_buffer("bias", None if bias is None else bias.detach().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()
        w = self.qweight
        wide = flat.shape[0] >= self.wide_rows
        if self.mode != "native":
            exact = self.mode == "exact" or wide
            out = F.linear(flat if exact else round_activations(flat), dequantize(w))
        elif isinstance(w, Q4Weight):
            kernel = torch.ops.mstar_cpu.q4_linear_wide if wide else torch.ops.mstar_cpu.q4_linear
            out = kernel(flat, w.blocks, w.in_features)
        else:
            kernel = torch.ops.mstar_cpu.int8_linear_wide if wide else torch.ops.mstar_cpu.int8_linear
            out = kernel(flat, w.weight, w.scales)
        if self.bias is not None:
            out += self.bias
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        kind = "q4" if isinstance(self.qweight, Q4Weight) else "int8"
        return f"{self.in_features} -> {self.out_features}, {kind}, {self.mode}"


class QuantEmbedding(nn.Module):
    """Token embedding read from a quantized (tied) LM-head weight: gathered rows, dequantized."""

    def __init__(self, weight: QuantWeight, dtype: torch.dtype) -> None:
        super().__init__()
        self.qweight = weight
        self.dtype = dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = dequantize(select_rows(self.qweight, input_ids.reshape(-1)))
        return rows.view(*input_ids.shape, -1).to(self.dtype)

