"""The fused CPU ops (RMSNorm with and without the residual add, the gated activations, rope)
against the torch path of the modules they replace, in float32 and bfloat16, odd sizes and
strided views; and the loaded model runs them.

Tolerances: rope rounds exactly where torch does, so it is bit-equal. RMSNorm sums the squares in
another order and the activations use their own exp (about 2 ulp), so float32 agrees to
FP32_TOLERANCE and bfloat16 to one bfloat16 rounding step (a value next to a rounding boundary
may round the other way).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.kernels.cpu.build import native_kernels
from mstar.models.families.gemma3 import GemmaMLP
from mstar.models.layers import fused_ops
from mstar.models.layers.blocks import RMSNorm, RotaryEmbedding, SiluAndMul, apply_rope
from mstar.models.layers.offset_rmsnorm import OffsetRMSNorm

DTYPES = [torch.float32, torch.bfloat16]
FP32_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
# Two bfloat16 ulps (2**-6 relative): torch's bf16 norm rounds twice (the normalised row, then
# its product with the weight) where the fused op rounds once, so they may land an ulp either side
# of the exact value (seen: 0.0156 at 1.36, one element of 8155).
BF16_TOLERANCE = {"rtol": 1.6e-2, "atol": 1e-3}
WIDTHS = [1, 7, 8, 13, 64, 576, 1000]


@pytest.fixture(scope="module", autouse=True)
def native(builtin_cache_dir):
    if not native_kernels(builtin_cache_dir):
        pytest.fail("the C++ kernels did not build; see the cpu_kernels_unavailable warning")
    if not fused_ops.native_ops_usable(torch.device("cpu")):
        pytest.skip("this CPU lacks AVX2: the models keep the torch path")


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    tolerance = FP32_TOLERANCE if expected.dtype == torch.float32 else BF16_TOLERANCE
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.float(), expected.float(), **tolerance)


def pair(module: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(torch path, fused path) of the same module."""
    fused = type(module).__new__(type(module))
    fused.__dict__ = dict(module.__dict__)
    fused_ops.use_native_ops(fused)
    return module, fused


def norm(cls, width: int, dtype: torch.dtype) -> torch.nn.Module:
    module = cls(width, 1e-6).to(dtype)
    with torch.no_grad():
        module.weight.copy_(torch.randn(width) * 0.5 + (0 if cls is OffsetRMSNorm else 1))
    return module


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls", [RMSNorm, OffsetRMSNorm])
@pytest.mark.parametrize("width", WIDTHS)
def test_rms_norm_matches_torch(cls, width, dtype):
    torch.manual_seed(width)
    reference, fused = pair(norm(cls, width, dtype))
    x = (torch.randn(5, width) * 3).to(dtype)
    close(fused(x), reference(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_of_strided_views(dtype):
    torch.manual_seed(0)
    reference, fused = pair(norm(RMSNorm, 24, dtype))
    base = torch.randn(6, 4, 48).to(dtype)
    for view in (base[:, 1, :24], base[..., 24:], base.transpose(0, 1)[..., :24], base[:, :, ::2]):
        close(fused(view), reference(view))
        inplace = view.clone()
        assert fused_ops.rms_norm_(inplace, fused.weight, fused.eps, False) is inplace
        close(inplace, reference(view))
    heads = base.clone()
    fused_ops.rms_norm_(heads[:, 1:3], fused.weight.new_ones(48), 1e-6, False)  # q heads of a qk
    close(heads[:, 1:3], norm_reference(base[:, 1:3]))
    assert torch.equal(heads[:, 0], base[:, 0]) and torch.equal(heads[:, 3], base[:, 3])


def norm_reference(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls", [RMSNorm, OffsetRMSNorm])
@pytest.mark.parametrize("width", [7, 64, 576])
def test_fused_add_rms_norm_writes_both_in_place(cls, width, dtype):
    torch.manual_seed(width)
    module = norm(cls, width, dtype)
    x, residual = torch.randn(3, width).to(dtype), torch.randn(3, width).to(dtype)
    total = x + residual
    expected = module(total)
    out, new_residual = fused_ops.add_rms_norm_(x.clone(), residual.clone(), module.weight,
                                                module.eps, cls is OffsetRMSNorm)
    assert torch.equal(new_residual, total)  # the sum rounds as torch's add
    close(out, expected)
    if cls is RMSNorm:
        _, fused = pair(module)
        got, got_residual = fused(x.clone(), residual.clone())
        assert torch.equal(got_residual, total)
        close(got, expected)


def gelu_tanh_reference(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_gated_activations_match_torch(width, dtype):
    torch.manual_seed(width)
    x = (torch.randn(4, 2 * width) * 4).to(dtype)
    x[0, :4] = torch.tensor([-100.0, 100.0, 0.0, -0.0]).to(dtype)[: min(4, width)]  # exp clamps
    reference, fused = pair(SiluAndMul())
    close(fused(x), reference(x))
    close(fused_ops.gelu_tanh_and_mul(x), gelu_tanh_reference(x))
    strided = torch.randn(3, 4 * width).to(dtype)[:, : 2 * width]
    close(fused_ops.silu_and_mul(strided), reference(strided))


def test_gemma_mlp_runs_gelu_tanh_fused():
    config = type("C", (), {"hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32,
                            "intermediate_size": 40})
    torch.manual_seed(1)
    reference = GemmaMLP(config)
    reference, fused = pair(reference)
    x = torch.randn(3, 32)
    close(fused(x), reference(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("head_dim", "rotary_dim"), [(64, 64), (16, 16), (24, 8), (80, 40)])
def test_rope_in_place_equals_torch_bit_for_bit(head_dim, rotary_dim, dtype):
    torch.manual_seed(head_dim + rotary_dim)
    rope = RotaryEmbedding(rotary_dim, 64, {"rope_theta": 10000.0})
    rope.init_cache(torch.device("cpu"), dtype)
    positions = torch.tensor([0, 5, 63, 17, 2])
    cos, sin = rope(positions)
    qkv = torch.randn(5, 7 * head_dim).to(dtype)  # 4 q heads and 2 k heads, then v
    qk = qkv[:, : 6 * head_dim].view(5, 6, head_dim)
    rot, rest = qk.split([rotary_dim, head_dim - rotary_dim], dim=-1)
    expected = torch.cat([apply_rope(rot, cos, sin), rest], dim=-1)
    v_before = qkv[:, 6 * head_dim:].clone()
    assert fused_ops.rope_(qk, cos, sin) is qk
    assert torch.equal(qk, expected)
    assert torch.equal(qkv[:, 6 * head_dim:], v_before)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 300), bf16=st.booleans())
def test_fused_norm_property(rows, width, bf16):
    """Any shape: the fused add-norm agrees with torch, and the residual is the exact sum."""
    dtype = torch.bfloat16 if bf16 else torch.float32
    torch.manual_seed(rows * 1000 + width)
    module = norm(RMSNorm, width, dtype)
    x, residual = torch.randn(rows, width).to(dtype), torch.randn(rows, width).to(dtype)
    expected, total = module(x, residual)
    out, new_residual = fused_ops.add_rms_norm_(x, residual, module.weight, module.eps, False)
    assert torch.equal(new_residual, total)
    close(out, expected)


def test_bad_inputs_raise_errors():
    weight = torch.ones(8)
    with pytest.raises(RuntimeError, match="weight must be contiguous"):
        fused_ops.rms_norm(torch.randn(2, 8), torch.ones(9), 1e-6, False)
    with pytest.raises(RuntimeError, match="residual must have"):
        fused_ops.add_rms_norm_(torch.randn(2, 8), torch.randn(3, 8), weight, 1e-6, False)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        fused_ops.silu_and_mul(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="2 \\* n"):
        fused_ops.silu_and_mul(torch.randn(2, 7))
    with pytest.raises(RuntimeError, match="rotary_dim"):
        fused_ops.rope_(torch.randn(2, 3, 8), torch.randn(2, 1, 10), torch.randn(2, 1, 10))


def test_loaded_model_runs_the_fused_ops(tiny_model_dir, make_engine, run, tiny_tokenizer):
    """The loader turns the fused ops on for a CPU model; each step calls them; greedy tokens are
    those of the torch path (the parity tests compare both with transformers)."""
    from mstar.engine.request.sampling_params import SamplingParams

    engine = make_engine(tiny_model_dir("qwen3"))  # q/k norms too
    model = engine.model_runner.model
    switchable = [m for m in model.modules() if hasattr(type(m), "native_ops")]
    assert switchable and all(m.native_ops for m in switchable)
    params = SamplingParams(temperature=0.0, max_tokens=12)
    requests = {f"r{i}": (tiny_tokenizer.encode(t), params)
                for i, t in enumerate(["The quick brown fox", "Hello there, how are"])}
    with torch.profiler.profile() as prof:
        fused = run(engine, requests)
    called = {event.key for event in prof.key_averages()}
    assert {f"mstar_cpu::{op}" for op in ("rms_norm", "fused_add_rms_norm", "rms_norm_inplace",
                                             "silu_and_mul", "rotary_embedding")} <= called
    fused_ops.use_native_ops(model, False)
    plain = run(engine, {f"p{k}": v for k, v in requests.items()})
    assert [fused[k]["token_ids"] for k in requests] == [plain[f"p{k}"]["token_ids"] for k in requests]


@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_cache_write_matches_index_copy(dtype):
    """The torch attention backend's two index_copy_ calls, in one op (strided k/v views)."""
    torch.manual_seed(3)
    cache = torch.randn(2, 3, 5, 4, 16).to(dtype)  # [2, kv_heads, blocks, block_size, head_dim]
    qkv = torch.randn(6, 8 * 16).to(dtype)
    k, v = qkv[:, 2 * 16: 5 * 16].view(6, 3, 16), qkv[:, 5 * 16:].view(6, 3, 16)
    slots = torch.tensor([19, 0, 7, 8, 3, 12])
    expected = cache.clone()
    flat = expected.view(2, 3, 20, 16)
    flat[0].index_copy_(1, slots, k.transpose(0, 1))
    flat[1].index_copy_(1, slots, v.transpose(0, 1))
    fused_ops.write_kv_cache_(cache, k, v, slots)
    assert torch.equal(cache, expected)
    with pytest.raises(RuntimeError, match="outside the cache"):
        fused_ops.write_kv_cache_(cache, k, v, slots + 1)
