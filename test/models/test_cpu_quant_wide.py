"""The wide-batch path of the quantized linears: dequantize a tile of the weight, then a float32
GEMM (csrc/dequant_gemm.h), used from WIDE_BATCH rows of activations (the bf16 tiles of a level
with avx512_bf16, from fewer rows: test_cpu_quant_bf16_tiles.py)."""

from __future__ import annotations

import pytest
import torch
from quant_weights import kernel_levels, quant_linear, random_weight

from mstar.models.quant.formats import dequantize, quantize_int8, quantize_q4
from mstar.models.quant.linear import WIDE_BATCH, QuantLinear

# (M, N, K): odd batch and output sizes; K = 4096 makes the 2 MiB scratch hold 128 weight rows,
# so N = 300 runs two full tiles and a partial one.
SHAPES = [(16, 1, 32), (17, 19, 64), (33, 40, 576), (5, 300, 4096)]


level = kernel_levels([0, 1])  # the dequantization has a scalar and an AVX2 version


@pytest.mark.parametrize("kind", ["q4", "int8", "int8-group32"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_wide_kernel_equals_float32_times_the_dequantized_weight(level, kind, m, n, k):
    w = random_weight(kind, n, k)
    x = torch.randn(m, k)
    got = quant_linear(w, x, level, wide=True)
    exact = x.double() @ dequantize(w).double().T
    magnitude = x.abs().double() @ dequantize(w).abs().double().T
    assert got.shape == (m, n)
    assert ((got.double() - exact).abs() <= 1e-5 * magnitude).all()


@pytest.mark.parametrize("kind", ["q4", "int8"])
def test_the_layer_switches_to_unrounded_activations_at_the_wide_batch(best_level, kind):
    """One block of x holds a large value and small ones: int16 rounding (under the layer's
    wide_rows) zeroes the small ones, the wide path keeps their sum: float32 from WIDE_BATCH rows,
    bf16 (each output rounded to 8 bits of mantissa) from fewer on a level with avx512_bf16."""
    dense = torch.ones(3, 32)
    dense[:, 0] = 0  # the large activation meets a zero weight
    w = quantize_q4(dense) if kind == "q4" else quantize_int8(dense)
    row = torch.full((32,), 0.01)
    row[0] = 1e4  # 0.01 is below half an int16 step of this block (1e4 / 32767)
    layer = QuantLinear(w, None, "native")
    rows = layer.wide_rows
    narrow = layer(row.expand(rows - 1, 32).contiguous())
    wide = layer(row.expand(rows, 32).contiguous())
    assert torch.equal(narrow, torch.zeros(rows - 1, 3))
    rtol = 1e-3 if rows == WIDE_BATCH else 2**-8  # fp16 d; bf16 tiles: x, w and y rounded to bf16
    torch.testing.assert_close(wide, torch.full((rows, 3), 0.31), rtol=rtol, atol=0)


def test_wide_kernel_refuses_a_mismatched_input(best_level):
    w = quantize_q4(torch.randn(4, 64))
    with pytest.raises(RuntimeError, match="64 features"):
        torch.ops.mstar_cpu.q4_linear_wide(torch.randn(WIDE_BATCH, 32), w.blocks, 64)
