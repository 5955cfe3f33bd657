"""The integer-dot CPU kernels: every SIMD level this CPU runs, against torch references.

Two references: the kernels' own arithmetic in torch (activations rounded to int16 per block of
32, then dequantize-then-fp32; equal up to float32 summation order), and the plain float32
product with the dequantized weights (the activation rounding costs at most ROUNDING_TOLERANCE
of the output's norm).
"""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from quant_weights import kernel_levels, quant_linear, random_weight

from mstar.kernels.cpu.levels import LEVELS, missing_features
from mstar.models.quant.formats import (
    ACTIVATION_MAX,
    dequantize,
    interleave_q4,
    quantize_q4,
    round_activations,
)
from mstar.models.quant.linear import QuantLinear

# (M, N, K): single rows, the x-row tiles of 4 and their tails, output counts that are not a
# multiple of 8 (q4's last rows stay Q4_1 rows, repacked when a kernel runs); from 8 rows the
# 8-output panels, a partial last panel included (21, 70 outputs: 16-column work items, 8-wide panels)
SHAPES = [(1, 19, 64), (2, 8, 96), (3, 9, 32), (4, 16, 32), (5, 27, 64), (7, 33, 128), (8, 21, 64),
          (13, 40, 576), (33, 70, 96)]
# Relative error (output norm) that int16 activations add over float32 ones on Gaussian inputs.
ROUNDING_TOLERANCE = 1e-4


level = kernel_levels(list(LEVELS))  # the integer-dot kernels have every level


@pytest.mark.parametrize("kind", ["q4", "int8", "int8-group32"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_kernel_matches_the_dequantize_then_fp32_reference(level, kind, m, n, k):
    w = random_weight(kind, n, k)
    x = torch.randn(m, k)
    x[0, :32] = 0  # an all-zero block has scale 0
    got = quant_linear(w, x, level)
    dense = dequantize(w).double()
    same_math = round_activations(x).double() @ dense.T
    torch.testing.assert_close(got.double(), same_math, rtol=1e-5, atol=1e-4 * dense.abs().max().item())
    exact = x.double() @ dense.T
    assert (got - exact).norm() <= ROUNDING_TOLERANCE * exact.norm()


def test_activation_bytes_are_the_torch_rounding(level):
    x = torch.randn(5, 96) * torch.logspace(-3, 3, 5).unsqueeze(1)
    q, d, s = torch.ops.mstar_cpu.quantize_activations(x, level)
    blocks = x.view(5, 3, 32)
    amax = blocks.abs().amax(-1)
    assert torch.equal(d, amax / ACTIVATION_MAX)
    assert torch.equal(q.view(5, 3, 32).float() * d.unsqueeze(-1), round_activations(x).view(5, 3, 32))
    assert torch.equal(s, d * q.view(5, 3, 32).sum(-1).float())
    assert q.dtype == torch.int16 and q.abs().max() == ACTIVATION_MAX


def test_the_torch_rounding_picks_the_kernels_integer_in_every_block(level):
    """Tens of thousands of blocks: x * 32767 / max|x| near .5 rounds to the same integer in torch
    (the reference's round_activations) as in the kernel (a reciprocal-then-multiply in torch moved
    about one block in a thousand)."""
    torch.manual_seed(1)
    x = torch.randn(4096, 320) * torch.logspace(-3, 3, 4096).unsqueeze(1)
    q, d, _ = torch.ops.mstar_cpu.quantize_activations(x, level)
    kernel = q.view(4096, 10, 32).float() * d.unsqueeze(-1)
    assert torch.equal(kernel, round_activations(x).view(4096, 10, 32))


@pytest.mark.parametrize("lacking", list(LEVELS), ids=[level.name for level in LEVELS.values()])
def test_a_level_the_cpu_lacks_is_refused(cpu_features, lacking):
    """Forcing a level refuses, naming the missing features, wherever the CPU lacks any of them
    (e.g. AVX-VNNI on an AVX-512 CPU); it never runs an instruction the CPU lacks."""
    missing = missing_features(lacking, cpu_features)
    if not missing:
        pytest.skip(f"this CPU has every feature of kernel level {LEVELS[lacking].name}")
    w = quantize_q4(torch.randn(4, 32))
    # The names hold "+" ("avx512_vnni+bw+vl"): matched as text, not as a regex (where "+" is a
    # quantifier, so the AVX-512 and AVX2 refusals never matched; only an AVX2-only or Alder Lake
    # CPU forces those, see scripts/avx2_check.sh).
    expected = f"not supported by this CPU: it lacks {', '.join(missing)}"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        torch.ops.mstar_cpu.q4_linear(torch.randn(1, 32), w.blocks, 32, lacking)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 21), blocks=st.integers(1, 5),
       kind=st.sampled_from(["q4", "int8"]), scale=st.floats(1e-3, 1e3))
def test_native_layer_equals_its_torch_reference(best_level, m, n, blocks, kind, scale):
    """The layer the engine runs (best level) against the same layer computed in torch: equal up
    to float32 rounding, 1e-5 of the sum of the products' magnitudes. Under the layer's wide_rows
    (the integer dot; the bf16 tiles from fewer rows: test_cpu_quant_bf16_tiles.py)."""
    w = random_weight(kind, n, 32 * blocks)
    bias = torch.randn(n)
    x = torch.randn(2, m, 32 * blocks) * scale
    layer = QuantLinear(w, bias, "native")
    assume(2 * m < layer.wide_rows)
    got = layer(x)
    want = QuantLinear(w, bias, "reference")(x)
    assert got.shape == want.shape == (2, m, n)
    magnitude = x.abs() @ dequantize(w).abs().T + bias.abs()
    assert ((got - want).abs() <= 1e-5 * magnitude).all()


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 20), blocks=st.integers(1, 3))
def test_the_kernels_layout_holds_the_same_weights_in_the_same_bytes(n, blocks):
    w = random_weight("q4", n, 32 * blocks)
    packed = interleave_q4(w)
    assert packed.blocks.shape == w.blocks.shape
    assert torch.equal(dequantize(packed), dequantize(w))
