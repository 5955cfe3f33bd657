"""The avx512_bf16 linear (csrc/bf16_dot.h: vdpbf16ps on bf16 activations and bf16 weights) and
the rule that routes a bf16 layer's rows to it or to oneDNN.

The oracle: float64 math on the same bf16 values. Every product of two bf16 numbers is exact in
float32, the kernel sums them in float32 (another order than torch's) and the op rounds the sum
to bf16 once: within half a bf16 ulp of the exact sum (2^-8 relative) plus the float32 summation
error (a few ulps of the sum of the terms' magnitudes). Skips name avx512_bf16 where the CPU lacks
it (scripts/avx2_check.sh runs this file on an emulated AVX2-only CPU: it must skip, not SIGILL).
"""

from __future__ import annotations

import pytest
import torch
from quant_weights import kernel_levels

from mstar.models.layers.cpu_bf16_linear import DOT_ROWS, Bf16Linear, native_bf16
from mstar.models.layers.cpu_linear import pack_weight, packed_linear

level = kernel_levels([4])  # avx512_bf16

# (N, K): one output row, K below one 32-feature chunk, K and N with tails past whole chunks and
# tiles, the built-in model's shapes (K = 576 is 18 chunks; 1536 is 48).
SHAPES = [(1, 1), (7, 5), (9, 31), (19, 33), (37, 100), (131, 96), (64, 576), (40, 1536)]


def _reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().T
    return out if bias is None else out + bias.double()


def _within(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> bool:
    exact = _reference(x, w, bias)
    terms = x.double().abs() @ w.double().abs().T
    if bias is not None:
        terms = terms + bias.double().abs()
    tolerance = exact.abs() * 2**-8 + 1e-6 * terms * max(1.0, x.shape[1] ** 0.5)
    return bool(((got.double() - exact).abs() <= tolerance).all())


@pytest.mark.parametrize("m", range(1, 10))  # every tile of 1 to 8 rows, and 8 + 1
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_kernel_matches_float64_math_on_the_bf16_values(level, m, n, k):
    torch.manual_seed(m * 10_000 + n * 100 + k)
    w = (torch.randn(n, k) * torch.rand(n, 1)).bfloat16()  # rows of different magnitude
    x = torch.randn(m, k).bfloat16()
    bias = torch.randn(n) if (m + n) % 2 else None
    got = torch.ops.mstar_cpu.bf16_linear(x, w, bias, level)
    assert got.dtype == torch.bfloat16 and got.shape == (m, n)
    assert _within(got, x, w, bias)


def test_kernel_beyond_one_tile_of_rows(level):
    """More rows than a tile (8): the tiles of x pass over each block of W."""
    torch.manual_seed(3)
    w, x, bias = torch.randn(200, 576).bfloat16(), torch.randn(21, 576).bfloat16(), torch.randn(200)
    assert _within(torch.ops.mstar_cpu.bf16_linear(x, w, bias, level), x, w, bias)


def test_layer_runs_the_kernel_up_to_dot_rows_and_onednn_above(level):
    """A layer with oneDNN's copy (native bf16): rows up to DOT_ROWS on the kernel, more rows on
    oneDNN (the two agree to the last bit on most outputs, so the rule is checked by name), each
    within the oracle's tolerance; without the copy, every row on the kernel."""
    if not native_bf16():
        pytest.skip("oneDNN has no native bf16 here (torch built without mkldnn)")
    torch.manual_seed(5)
    linear = torch.nn.Linear(96, 70, bias=True).to(torch.bfloat16)
    layer = Bf16Linear(linear, wide=True)
    assert [layer.on_kernel(m) for m in (1, DOT_ROWS, DOT_ROWS + 1)] == [True, True, False]
    assert Bf16Linear(linear).on_kernel(10 * DOT_ROWS)
    packed = pack_weight(linear.weight)
    for m in (1, DOT_ROWS, DOT_ROWS + 1, 3 * DOT_ROWS):
        x = torch.randn(m, 96).bfloat16()
        got = layer(x)
        if m <= DOT_ROWS:
            want = torch.ops.mstar_cpu.bf16_linear(x, linear.weight, linear.bias, -1)
        else:
            want = packed_linear(x, packed, linear.bias)
        assert torch.equal(got, want), m
        assert _within(got, x, linear.weight, linear.bias), m
