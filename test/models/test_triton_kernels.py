"""Triton kernels against the torch code they replace.

With ``--device cpu`` (CI) the kernels run in Triton's interpreter at small shapes (conftest sets
TRITON_INTERPRET); with ``--device cuda`` (``scripts/gpu_check.sh``) they are compiled and also
checked at the built-in model's shapes.
"""

from __future__ import annotations

import random

import pytest
import torch

from mstar.engine.attention import AttentionInputs, get_backend
from mstar.models.layers.blocks import RMSNorm, RotaryEmbedding, SiluAndMul
from mstar.models.layers.blocks import apply_rope as torch_apply_rope

triton = pytest.importorskip("triton")
INTERPRETING = bool(triton.knobs.runtime.interpret)
if not INTERPRETING and not torch.cuda.is_available():
    pytest.skip("needs CUDA or Triton's interpreter (--device cpu)", allow_module_level=True)
ON_CUDA = not INTERPRETING

# The kernel modules import triton.
from mstar.kernels.activation import silu_and_mul  # noqa: E402
from mstar.kernels.norm import rms_norm  # noqa: E402
from mstar.kernels.rope import apply_rope  # noqa: E402

DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}

# (q heads, kv heads, head dim, block size, context lengths of the decodes, (query len, context
# len) of the prefill chunks): GQA, a block size that is not a power of two, contexts over many
# K/V tiles, a fresh prompt and a chunk extending a cached prefix.
SMALL = [
    (4, 2, 16, 16, [1, 17, 70], [(9, 9), (20, 85)]),
    (6, 2, 24, 5, [3, 40], [(33, 33)]),
    (2, 2, 16, 8, [], [(5, 5), (1, 12), (70, 70)]),
]
# The built-in model's attention (9 q heads, 3 kv heads, head dim 64) at serving sizes.
REAL = [
    (9, 3, 64, 16, [random.Random(i).randint(1, 2048) for i in range(256)], []),
    (9, 3, 64, 16, [100, 900], [(512, 512), (256, 1000), (1, 300)]),
]
SHAPES = SMALL + (REAL if ON_CUDA else [])


def _step(num_heads, num_kv_heads, head_dim, block_size, decode_ctx, prefills, dtype, seed=0):
    """A random mixed step: its AttentionInputs, q/k/v and a cache holding every earlier token."""
    gen = torch.Generator().manual_seed(seed)
    query_lens = [1] * len(decode_ctx) + [q for q, _ in prefills]
    ctx_lens = decode_ctx + [c for _, c in prefills]
    blocks_per_seq = [-(-c // block_size) for c in ctx_lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()  # scattered pages
    tables, slots = [], []
    for n, ctx, q_len in zip(blocks_per_seq, ctx_lens, query_lens, strict=True):
        table, order = order[:n], order[n:]
        tables.append(table)
        slots += [table[p // block_size] * block_size + p % block_size for p in range(ctx - q_len, ctx)]
    width = max(blocks_per_seq)
    tables = [t + [0] * (width - len(t)) for t in tables]
    cache = torch.randn(2, num_kv_heads, num_blocks, block_size, head_dim, generator=gen).to(dtype)
    tokens = sum(query_lens)
    q = torch.randn(tokens, num_heads, head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(tokens, num_kv_heads, head_dim, generator=gen).to(dtype) for _ in "kv")
    inputs = AttentionInputs(
        slot_mapping=torch.tensor(slots, device=DEVICE), block_tables=torch.tensor(tables, device=DEVICE),
        context_lens=torch.tensor(ctx_lens, device=DEVICE), query_lens=query_lens,
        context_lens_list=ctx_lens, num_decodes=len(decode_ctx), block_size=block_size, dtype=dtype,
        seq_keys=list(range(len(ctx_lens))))
    return inputs, q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), cache.to(DEVICE)


def _attend(backend_name, inputs, q, k, v, cache):
    metadata = get_backend(backend_name).build(inputs)
    metadata.begin_forward()
    return metadata.attend(q, k, v, cache)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"h{s[0]}-kv{s[1]}-d{s[2]}-bs{s[3]}-n{len(s[4])}")
def test_paged_attention_matches_torch_backend(shape, dtype):
    inputs, q, k, v, cache = _step(*shape, dtype)
    expected_cache = cache.clone()
    expected = _attend("torch", inputs, q, k, v, expected_cache)
    out = _attend("triton", inputs, q, k, v, cache)
    assert torch.equal(cache, expected_cache)  # the new K/V land in the same slots
    torch.testing.assert_close(out, expected, atol=TOL[dtype], rtol=TOL[dtype])


def test_padding_rows_change_nothing():
    """A CUDA-graph batch pads with rows of slot -1 and context 0: they write no K/V, output
    zeros, and leave the real rows' outputs as they were."""
    inputs, q, k, v, cache = _step(4, 2, 16, 16, [5, 30], [], torch.float32)
    expected_cache = cache.clone()
    expected = _attend("triton", inputs, q, k, v, expected_cache)
    pad = 2
    padded = AttentionInputs(
        slot_mapping=torch.cat([inputs.slot_mapping, torch.full((pad,), -1, device=DEVICE)]),
        block_tables=torch.cat([inputs.block_tables, torch.zeros_like(inputs.block_tables[:pad])]),
        context_lens=torch.cat([inputs.context_lens, torch.zeros(pad, dtype=torch.int64, device=DEVICE)]),
        query_lens=[1] * 4, context_lens_list=inputs.context_lens_list + [0] * pad, num_decodes=4,
        block_size=16, dtype=torch.float32, seq_keys=[0, 1, 2, 3])
    junk = [torch.full_like(t[:pad], 7.0) for t in (q, k, v)]
    out = _attend("triton", padded, *(torch.cat([t, j]) for t, j in zip((q, k, v), junk, strict=True)),
                  cache)
    assert torch.equal(cache, expected_cache)
    assert torch.equal(out[:2], expected) and not out[2:].any()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("with_residual", [False, True])
@pytest.mark.parametrize("dim", [576] if ON_CUDA else [40])
def test_rms_norm_matches_module(dim, with_residual, dtype):
    norm = RMSNorm(dim, 1e-5).to(DEVICE, dtype)
    torch.nn.init.normal_(norm.weight)
    x, residual = (torch.randn(7, dim, device=DEVICE).to(dtype) for _ in "xr")
    if not with_residual:
        torch.testing.assert_close(rms_norm(x, norm.weight, norm.eps), norm(x),
                                   atol=TOL[dtype], rtol=TOL[dtype])
        return
    out, new_residual = rms_norm(x, norm.weight, norm.eps, residual)
    expected, expected_residual = norm(x, residual)
    if ON_CUDA or dtype == torch.float32:
        assert torch.equal(new_residual, expected_residual)
    else:  # the interpreter rounds float32 -> bfloat16 toward zero, not to nearest
        torch.testing.assert_close(new_residual, expected_residual, atol=0, rtol=2**-7)
    torch.testing.assert_close(out, expected, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("heads,head_dim", [(12, 64)] if ON_CUDA else [(3, 24), (6, 16)])
def test_rope_matches_torch(heads, head_dim, dtype):
    rotary = RotaryEmbedding(head_dim, 4096, {"rope_theta": 10000.0})
    rotary.init_cache(DEVICE, dtype)
    positions = torch.tensor([0, 1, 5, 77, 4095], device=DEVICE)
    # Strided like the model's q/k: a view of the fused qkv projection's output.
    qkv = torch.randn(5, (heads + 2) * head_dim, device=DEVICE).to(dtype)
    x = qkv[:, : heads * head_dim].view(5, heads, head_dim)
    cos, sin = rotary(positions)
    # bf16: the kernel rounds once, the torch path after each op.
    torch.testing.assert_close(apply_rope(x, positions, rotary.cos_sin), torch_apply_rope(x, cos, sin),
                               atol=2 * TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("width", [1536, 8960] if ON_CUDA else [24, 1100])
def test_silu_and_mul_matches_module(width, dtype):
    x = (4 * torch.randn(6, 2 * width, device=DEVICE)).to(dtype)
    torch.testing.assert_close(silu_and_mul(x), SiluAndMul()(x), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.skipif(ON_CUDA, reason="covered by the CUDA parity tests once the runner picks triton")
def test_engine_tokens_match_with_triton_attention(tiny_model_dir, make_engine, run, monkeypatch):
    """Greedy tokens of a whole engine run (prefix caching, chunked prefill, mixed steps) do
    not change when every attention call goes through the Triton backend."""
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.engine.runner import model_runner

    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prefix = [5 + i for i in range(20)]
    requests = {f"r{i}": (prefix + [60 + i] * (3 + i), params) for i in range(2)}
    settings = dict(max_num_batched_tokens=16, kv_block_size=8, num_kv_blocks=32)
    expected = run(make_engine(tiny_model_dir("llama"), **settings), requests)
    chosen = []
    monkeypatch.setattr(model_runner, "get_backend",
                        lambda name: chosen.append(name) or get_backend("triton"))
    assert run(make_engine(tiny_model_dir("llama"), **settings), requests) == expected
    assert chosen
