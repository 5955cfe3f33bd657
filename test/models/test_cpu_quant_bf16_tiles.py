"""The wide path of the quantized linears on a CPU with avx512_bf16: q4 (x8 groups) and int8 weights
dequantized to bf16 tiles, x rounded to bf16, aten's bf16 GEMM (csrc/dequant_bf16.h); on a CPU
with AMX, dequantized into AMX's own tiles (csrc/dequant_amx.h). Taken from the level's rows
(quant_wide_rows: fewer than the float32 tiles' WIDE_BATCH). Every test here skips on a CPU
without avx512_bf16 (or AMX, for the AMX level), naming the feature (there the path is never
chosen)."""

from __future__ import annotations

import pytest
import torch
from quant_weights import kernel_levels, quant_linear, random_weight

from mstar.engine.request.sampling_params import SamplingParams
from mstar.kernels.cpu.levels import missing_features
from mstar.models.families import llama
from mstar.models.quant.formats import Q4Weight, dequantize, interleave_q4
from mstar.models.quant.linear import WIDE_BATCH, QuantLinear

level = kernel_levels([4, 5])  # avx512_bf16, amx
amx_level = kernel_levels([5])

# (M, N, K): M around the crossovers (8 for int8, 32 for q4); N with a tail of N % 8 q4 rows that
# are not an x8 group; K = 4096 makes a tile hold 256 weight rows, so N = 1100 runs full tiles and
# a partial one on each thread (the last ending in a tail).
# M = 100 runs seven blocks of 16 rows of x on AMX: three pairs and one alone.
SHAPES = [(8, 1, 32), (7, 19, 64), (31, 40, 576), (32, 13, 96), (33, 1100, 4096), (100, 37, 64)]


def bf16_reference(w, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 torch on bf16-rounded x and dequantized W, float64 sums; and the sum of the
    products' magnitudes."""
    xb = x.bfloat16().double()
    wb = dequantize(w).bfloat16().double()
    return xb @ wb.T, xb.abs() @ wb.abs().T


@pytest.mark.parametrize("kind", ["q4", "int8", "int8-group32"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_bf16_tiles_equal_float32_on_bf16_rounded_operands(level, kind, m, n, k):
    """Tolerance: 2^-7 of the sum of the products' magnitudes. The products of bf16 numbers are
    exact and summed in float32; what differs from the reference is a weight rounded to the other
    neighbouring bf16 (q4: q * d + m by one FMA, not a multiply and an add: 2^-8 of that product)
    and the output rounded to bf16 once (2^-9 of it)."""
    w = random_weight(kind, n, k)
    x = torch.randn(m, k)
    got = quant_linear(w, x, level, wide=True)
    want, magnitude = bf16_reference(w, x)
    assert got.shape == (m, n) and got.dtype == torch.float32
    assert ((got.double() - want).abs() <= 2**-7 * magnitude).all()


@pytest.mark.parametrize("kind", ["q4", "int8", "int8-group32"])
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_amx_tiles_keep_the_float32_sums(amx_level, kind, m, n, k):
    """AMX sums the exact bf16 products in float32 and returns the sums unrounded: within 2^-12 of
    the products' magnitudes (the bf16 tiles, rounding each output to bf16, miss this by 16x)."""
    w = random_weight(kind, n, k)
    x = torch.randn(m, k)
    got = quant_linear(w, x, amx_level, wide=True)
    want, magnitude = bf16_reference(w, x)
    assert ((got.double() - want).abs() <= 2**-12 * magnitude).all()


@pytest.fixture
def wide_level(cpu_features) -> int:
    """The CPU's own level (what QuantLinear and the decode stack run), one with bf16 tiles."""
    own = torch.ops.mstar_cpu.cpu_level()
    if own not in (4, 5):
        missing = ", ".join(missing_features(4, cpu_features))
        pytest.skip(f"this CPU lacks {missing} (kernel level avx512_bf16)")
    return own


@pytest.mark.parametrize("kind", ["q4", "int8"])
def test_the_layer_takes_the_bf16_tiles_from_its_formats_rows(wide_level, kind):
    """Under ``wide_rows`` the integer dot, from it the bf16 tiles, with the bias added after; the
    level's rows are fewer than the float32 tiles'."""
    w = random_weight(kind, 21, 96)
    bias = torch.randn(21)
    layer = QuantLinear(w, bias, "native")
    rows = layer.wide_rows
    assert rows == torch.ops.mstar_cpu.quant_wide_rows(kind == "q4", wide_level) < WIDE_BATCH
    ops = torch.ops.mstar_cpu
    for m, wide in ((rows - 1, False), (rows, True), (rows + 5, True)):
        x = torch.randn(m, 96)
        if isinstance(w, Q4Weight):
            op = ops.q4_linear_wide if wide else ops.q4_linear
            want = op(x, interleave_q4(w).blocks, 96)
        else:
            want = (ops.int8_linear_wide if wide else ops.int8_linear)(x, w.weight, w.scales)
        assert torch.equal(layer(x), want + bias)


@pytest.mark.parametrize("setting", ["q4", "int8"])
def test_decode_stack_takes_the_same_path_as_the_layers_at_wide_rows(
        wide_level, setting, tiny_model_dir, make_engine, run, monkeypatch):
    """33 streams decode at least 32 rows a step: the one-call decoder stack (decode_layer.h) takes
    the bf16 tiles where QuantLinear does, so it generates what the module-by-module path does."""
    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=256, enable_prefix_caching=False,
                         max_num_seqs=64, quantization=setting)
    stack_model = engine.model_runner.model.model
    prompts = [[5 + i, 6, 7 + i, 8] for i in range(33)]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    def generate(label: str) -> list[list[int]]:
        got = run(engine, {f"{label}{i}": (p, params) for i, p in enumerate(prompts)})
        return [got[f"{label}{i}"]["token_ids"] for i in range(len(prompts))]

    rows = []
    stack = llama.decode_layers
    monkeypatch.setattr(llama, "decode_layers", lambda s, hidden, *args: (
        rows.append(hidden.shape[0]), stack(s, hidden, *args))[1])
    stacked = generate("a")
    assert max(rows) >= torch.ops.mstar_cpu.quant_wide_rows(setting == "q4")  # the stack ran wide
    stack_model.native_ops = False
    for layer in stack_model.layers:
        layer.native_ops = False
    assert stacked == generate("b")
