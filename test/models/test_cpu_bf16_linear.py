"""The bf16-weight CPU linear (bf16 weights, float32 arithmetic): every SIMD level this CPU runs
against torch's float32 product with the same bf16 weights, and a model in this mode against the
same model whose linears torch computes that way. (The avx512_bf16 kernel that bf16 activations
run at level avx512_bf16 has its own tests: test_cpu_bf16_dot.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from quant_weights import kernel_levels

from mstar.models.layers.cpu_bf16_linear import Bf16Linear, native_bf16, runs_bf16_kernel
from mstar.models.layers.cpu_linear import PackedLinear

# (M, N, K): one row (the streaming path), the tiles of 5 rows and their tails, K not a multiple
# of the 16 features per weight load, odd N, the built-in model's shapes.
SHAPES = [(1, 19, 64), (1, 7, 5), (2, 8, 96), (3, 9, 17), (5, 16, 32), (7, 33, 130),
          (13, 40, 576), (32, 131, 576), (40, 3, 1536)]


# every level with AVX2 runs the AVX2 kernel (avx512_bf16's on float32 activations)
level = kernel_levels([0, 1, 2, 3, 4])


def _reference(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """float32 math on the bf16 values, in float64 so only the kernel's rounding remains."""
    b = None if bias is None else bias.double()
    return F.linear(x.double(), w.double(), b)


def _tolerance(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """float32 summation error bound: a few ulps of the sum of the terms' magnitudes (the
    products and the bias)."""
    terms = x.double().abs() @ w.double().abs().T
    if bias is not None:
        terms = terms + bias.double().abs()
    return 1e-6 * terms * max(1.0, x.shape[1] ** 0.5)


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_kernel_matches_float32_math_on_the_bf16_weights(level, m, n, k):
    torch.manual_seed(m * 10_000 + n * 100 + k)
    w = (torch.randn(n, k) * torch.rand(n, 1)).bfloat16()  # rows of different magnitude
    x, bias = torch.randn(m, k), torch.randn(n)
    got = torch.ops.mstar_cpu.bf16_linear(x, w, bias, level)
    assert got.dtype == torch.float32 and got.shape == (m, n)
    assert ((got.double() - _reference(x, w, bias)).abs() <= _tolerance(x, w, bias)).all()


def test_bf16_activations_give_the_rounded_float32_result(level):
    torch.manual_seed(0)
    w, x = torch.randn(37, 100).bfloat16(), torch.randn(6, 100).bfloat16()
    got = torch.ops.mstar_cpu.bf16_linear(x, w, None, level)
    assert got.dtype == torch.bfloat16
    exact = _reference(x, w, None)
    # One bf16 rounding of the float32 sums: within half a bf16 ulp (2^-8 relative) plus float32 error.
    assert ((got.double() - exact).abs() <= exact.abs() * 2**-8 + _tolerance(x, w)).all()


def test_a_bad_weight_is_refused(best_level):
    with pytest.raises(RuntimeError, match="bfloat16"):
        torch.ops.mstar_cpu.bf16_linear(torch.randn(1, 8), torch.randn(4, 8), None, -1)
    with pytest.raises(RuntimeError, match="features"):
        torch.ops.mstar_cpu.bf16_linear(torch.randn(1, 9), torch.randn(4, 8).bfloat16(), None, -1)


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 70), k=st.integers(1, 200),
       scale=st.floats(1e-3, 1e3), bias=st.booleans(), seed=st.integers(0, 2**31))
def test_layer_equals_float32_math_on_its_bf16_weights(best_level, m, n, k, scale, bias, seed):
    """The layer the engine runs (best level), any shape, input [2, m, k] float32."""
    torch.manual_seed(seed)
    linear = torch.nn.Linear(k, n, bias=bias).to(torch.bfloat16)
    x = torch.randn(2, m, k) * scale
    got = Bf16Linear(linear)(x)
    assert got.shape == (2, m, n)
    want = _reference(x.view(-1, k), linear.weight, linear.bias)
    tolerance = _tolerance(x.view(-1, k), linear.weight, linear.bias)
    assert ((got.view(-1, n).double() - want).abs() <= tolerance).all()


class _TorchBf16Linear(torch.nn.Module):
    """The reference: torch's float32 product with the same bf16 weights, rounded to bf16."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight, self.bias = weight, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.float()
        return F.linear(x.float(), self.weight.float(), bias).to(x.dtype)


def _bf16_weight(linear: torch.nn.Module) -> torch.Tensor:
    """The bf16 weight a CPU linear multiplies with (oneDNN's packed layout read back)."""
    if isinstance(linear, PackedLinear):
        return linear.packed_weight.to_dense()
    return linear.weight


def _cpu_linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's linears as the loader left them, after checking that every one runs the bf16
    path of this CPU: the bf16-weight kernel (with oneDNN's packed copy for wide batches where
    bf16 is native), oneDNN-packed alone where bf16 is native without avx512_bf16."""
    kind = Bf16Linear if runs_bf16_kernel(torch.device("cpu"), torch.bfloat16) else PackedLinear
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    layers = [m for m in model.modules() if isinstance(m, kind)]
    assert model.lm_head in layers and _bf16_weight(model.lm_head).dtype == torch.bfloat16
    if kind is Bf16Linear and model.tie_word_embeddings:  # the kernel reads the embedding's rows
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert all((layer.wide is not None) == native_bf16() for layer in layers)
    return layers


def _use_torch_math(model: torch.nn.Module) -> None:
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, (Bf16Linear, PackedLinear)):
                setattr(parent, child_name, _TorchBf16Linear(_bf16_weight(child), child.bias))


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_model_gives_the_greedy_tokens_of_float32_math_on_bf16_weights(
        family, tiny_model_dir, make_engine, greedy, best_level):
    """A bf16 model runs every linear, the tied LM head included, on this CPU's bf16 path: the
    bf16-weight kernel at the best level (avx512_bf16's vdpbf16ps on the decode rows and oneDNN's
    packed bf16 on prefill where the CPU has it) and the scalar one; oneDNN alone where bf16 is
    native without avx512_bf16. Each decodes what torch does in float32 with the same weights.
    qwen2: tied embeddings, q/k/v biases (layer by layer); llama: no biases, so the decode steps
    run the one-call decode stack."""
    model_dir = tiny_model_dir(family)
    prompts = [[1, 5, 9, 13, 2], [3, 4], list(range(20, 60))]
    kernel = runs_bf16_kernel(torch.device("cpu"), torch.bfloat16)
    runs = ["best", "scalar"] if kernel else ["onednn"]
    tokens = {}
    for name in ["torch", *runs]:
        engine = make_engine(model_dir, dtype="bfloat16", enable_prefix_caching=False)
        model = engine.model_runner.model
        for layer in _cpu_linears(model):
            if name == "scalar":
                layer.level = 0
        if name == "torch":
            _use_torch_math(model)
        tokens[name] = greedy(engine, prompts, 12, ignore_eos=True)
    for name in runs:
        assert tokens[name] == tokens["torch"], name


@pytest.mark.parametrize("quantization", ["int8", "q4"])
def test_auto_gives_quantized_weights_float32_activations(quantization, tmp_path):
    """Quantized kernels take float32 activations: auto keeps them in float32 on every CPU, native
    bf16 or not (bf16 would only add conversions and keep the one-call decode stack off)."""
    from mstar.engine.placement import resolve_device_dtype
    from mstar.settings import WorkerSettings

    settings = WorkerSettings(device="cpu", dtype="auto", quantization=quantization)
    _, dtype = resolve_device_dtype(settings, tmp_path)
    assert dtype == torch.float32
