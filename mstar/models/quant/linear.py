"""Weight-only quantized layers: linears that run the native kernels, and the tied embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mstar.kernels.cpu.levels import Feature
from mstar.models.layers.cpu_linear import pack_weight, packed_linear
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
# With oneDNN's bf16 copy (``QuantLinear(copy=True)``: the shipped-precision default, CPUs with
# native bf16), the most rows the quantized kernels take before the copy runs, by the CPU's
# fastest bf16 arithmetic and weight format (q4: True); None: no copy is held, the quantized
# kernels take every batch. Measured per linear of the built-in model, one thread's CPU time,
# ``benchmark.cpu_kernels --only bf16_packed,mstar_q4,mstar_int8,q4_wide,int8_wide`` (docs/
# engine.rst, "Shipped precision"). With AMX the quantized wide path runs on AMX's tiles
# (csrc/dequant_amx.h): summed over the four layer linears it beats oneDNN's packed copy at 32
# rows (763 against 887 us) and loses at 64 (1109 against 1051) and beyond, so q4 layers keep a
# copy for prefill chunks above 48 rows; the int8 LM head runs one row per sequence, and there
# the tiles and the copy are within 10% up to 32 rows, no reason to hold 56 MB: no copy. On
# avx512_bf16 without AMX, session 7 measured oneDNN 1.1-1.4x faster than the bf16 tiles from 32
# rows and the tiles tying q4's integer dot at 24 rows: the copy takes q4 from 24 rows there (an
# estimate from those two measurements); int8's integer dot takes eight rows of W at a time under
# 4 rows of x (qdot_kernel.h) and beats the copy there, so int8 keeps 3.
COPY_ROWS = {Feature.AMX: {True: 48, False: None}, Feature.AVX512_BF16: {True: 24, False: 3}}


def copy_rows(q4: bool) -> int | None:
    """The most rows a quantized layer with a bf16 copy runs on its own kernels here (None: it
    holds no copy)."""
    features = Feature(torch.ops.mstar_cpu.cpu_features())
    best = Feature.AMX if Feature.AMX in features else Feature.AVX512_BF16
    return COPY_ROWS[best][q4]


class QuantLinear(nn.Module):
    """y = round_activations(x) @ dequantize(W)^T + b (x unrounded from ``wide_rows`` rows; bf16
    rounded there on a level with avx512_bf16 or AMX), in float32, returned in x's dtype.

    ``copy`` (native mode, CPUs with native bf16, where ``copy_rows`` holds one for the format):
    also hold oneDNN's packed bf16 copy of dequantize(W), which runs every batch of more than
    ``kernel_rows`` rows (x and the sums in
    bf16, as the bf16 tiles would compute them, but on oneDNN's prepacked layout, and on AMX
    where the CPU has it). The weights are then held twice, the copy at 2 bytes a weight."""

    def __init__(self, weight: QuantWeight, bias: torch.Tensor | None, mode: str,
                 copy: bool = False, logits: bool = False) -> None:
        super().__init__()
        # ``logits`` (the LM head): float32 out whatever x's dtype. The kernels sum in float32;
        # rounded to bf16, logits near 25 step by 1/8 and greedy decoding meets ties (the built-in
        # model's first answer token: 25.32 against 25.24 in float32, both 25.375 in bf16).
        self.out_dtype = torch.float32 if logits else None
        if mode not in MODES:
            raise ValueError(f"unknown QuantLinear mode {mode!r}; expected one of {MODES}")
        if copy and mode != "native":
            raise ValueError("a bf16 copy needs the native kernels (mode 'native')")
        # The most rows the quantized kernels take (None: any), what the decode stack may pass.
        self.kernel_rows = copy_rows(isinstance(weight, Q4Weight)) if copy else None
        # A plain attribute, not a buffer: a decode step streams ``qweight``, a wide batch this
        # copy, never both (benchmark/roofline_weights.py counts what a decode step streams).
        copy = self.kernel_rows is not None
        self.wide = pack_weight(dequantize(weight).to(torch.bfloat16)) if copy else None
        self.wide_bias = None if bias is None or not copy else bias.detach().to(torch.bfloat16)
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

    def on_kernel(self, rows: int) -> bool:
        """``rows`` rows of x run the quantized weights, not the bf16 copy."""
        return self.kernel_rows is None or rows <= self.kernel_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if not self.on_kernel(flat.shape[0]):
            out = packed_linear(flat.to(torch.bfloat16), self.wide, self.wide_bias)
            return out.view(*x.shape[:-1], self.out_features).to(self.out_dtype or x.dtype)
        flat = flat.float()
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
        return out.view(*x.shape[:-1], self.out_features).to(self.out_dtype or x.dtype)

    def extra_repr(self) -> str:
        kind = "q4" if isinstance(self.qweight, Q4Weight) else "int8"
        copy = "" if self.wide is None else f", bf16 copy above {self.kernel_rows} rows"
        return f"{self.in_features} -> {self.out_features}, {kind}, {self.mode}{copy}"


class QuantEmbedding(nn.Module):
    """Token embedding read from a quantized (tied) LM-head weight: gathered rows, dequantized."""

    def __init__(self, weight: QuantWeight, dtype: torch.dtype) -> None:
        super().__init__()
        self.qweight = weight
        self.dtype = dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        rows = dequantize(select_rows(self.qweight, input_ids.reshape(-1)))
        return rows.view(*input_ids.shape, -1).to(self.dtype)

