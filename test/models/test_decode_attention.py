"""The native paged decode attention (``fused_ops.paged_decode_attention``) against the torch
path: the op alone against SDPA over each sequence's gathered pages, and the torch attention
backend's decode rows with the native path on and off (pages gathered through the decode mirror,
masked SDPA), in float32 and bfloat16, GQA, sliding windows, several sequences and context
lengths on and around block boundaries, with decode rows next to a prefill chunk.

Tolerances: float32 sums in another order than SDPA (1e-5); bfloat16 agrees to a bfloat16
rounding step of the output (the op keeps the scores and probabilities in float32, SDPA rounds
the probabilities to bfloat16 before the weighted sum).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_fused_ops import native  # noqa: F401 (autouse: builds the kernels, skips without AVX2)

from mstar.engine.attention.inputs import AttentionInputs
from mstar.engine.attention.torch_backend import TOKEN_ROWS_MAX_QUERY, TorchAttentionBackend
from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.families import llama
from mstar.models.layers import fused_ops

BLOCK, BLOCKS = 16, 64
DIM = 64  # test_op_reads_odd_head_dims covers others
TOLERANCE = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2}}
# Context lengths: one token, a block less one, a block, a block plus one, several blocks.
CONTEXTS = [1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5, 7 * BLOCK]


def paged(contexts: list[int], kv_heads: int, dtype: torch.dtype, seed: int = 0):
    """A random cache and shuffled, non-contiguous block tables (padded with block 0)."""
    gen = torch.Generator().manual_seed(seed)
    cache = torch.randn(2, kv_heads, BLOCKS, BLOCK, DIM, generator=gen).to(dtype)
    ids = torch.randperm(BLOCKS, generator=gen).tolist()
    width = max(-(-n // BLOCK) for n in contexts) + 1
    tables = torch.zeros(len(contexts), width, dtype=torch.int64)
    for s, n in enumerate(contexts):
        for b in range(-(-n // BLOCK)):
            tables[s, b] = ids.pop()
    return cache, tables


def sdpa_reference(q, cache, tables, contexts, window, scale) -> torch.Tensor:
    """Per sequence: its pages gathered, SDPA over the visible keys in float32."""
    out = []
    for s, n in enumerate(contexts):
        kv = cache.index_select(2, tables[s]).flatten(2, 3)[:, :, :n].float()
        start = max(0, n - window) if window else 0
        o = F.scaled_dot_product_attention(q[s, :, None].float(), kv[0, :, start:], kv[1, :, start:],
                                           enable_gqa=True, scale=scale)
        out.append(o[:, 0])
    return torch.stack(out).to(q.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("heads", "kv_heads"), [(9, 3), (4, 4), (8, 1)])
@pytest.mark.parametrize("window", [None, 1, BLOCK + 3])
def test_op_matches_sdpa_over_the_gathered_pages(dtype, heads, kv_heads, window):
    cache, tables = paged(CONTEXTS, kv_heads, dtype)
    q = torch.randn(len(CONTEXTS), heads, DIM).to(dtype)
    lens = torch.tensor(CONTEXTS)
    for scale in (None, 0.3):
        got = fused_ops.paged_decode_attention(q, cache, tables, lens, window, scale)
        expected = sdpa_reference(q, cache, tables, CONTEXTS, window, scale)
        assert got.dtype == dtype and got.shape == q.shape
        torch.testing.assert_close(got.float(), expected.float(), **TOLERANCE[dtype])


def test_op_reads_strided_queries_and_rejects_bad_tables():
    cache, tables = paged([BLOCK + 2], 3, torch.float32)
    qkv = torch.randn(1, 12, DIM)
    q = qkv[:, :9]  # the q heads of a fused qk view, not contiguous
    got = fused_ops.paged_decode_attention(q, cache, tables, torch.tensor([BLOCK + 2]), None, None)
    torch.testing.assert_close(got, sdpa_reference(q, cache, tables, [BLOCK + 2], None, None),
                               **TOLERANCE[torch.float32])
    with pytest.raises(RuntimeError, match="outside the cache"):
        fused_ops.paged_decode_attention(q, cache, tables + BLOCKS, torch.tensor([BLOCK + 2]), None, None)
    with pytest.raises(RuntimeError, match="not covered by its block table"):
        fused_ops.paged_decode_attention(q, cache, tables, torch.tensor([100 * BLOCK]), None, None)


@pytest.mark.parametrize("dim", [8, 32, 40, 80, 100, 128, 256])
def test_op_reads_odd_head_dims(dim):
    """Head sizes the AVX-512 kernel takes with a size known at compile time (64 above, 128) and
    read at run time (32, 80, 256), and those it leaves to the AVX2 one (8, 40, 100)."""
    contexts = [BLOCK + 3, 2]
    gen = torch.Generator().manual_seed(dim)
    cache = torch.randn(2, 2, BLOCKS, BLOCK, dim, generator=gen)
    tables = torch.tensor([[5, 9], [3, 0]])
    q = torch.randn(2, 4, dim, generator=gen)
    got = fused_ops.paged_decode_attention(q, cache, tables, torch.tensor(contexts), None, None)
    torch.testing.assert_close(got, sdpa_reference(q, cache, tables, contexts, None, None),
                               **TOLERANCE[torch.float32])


@pytest.mark.parametrize("dim", [64, 40])  # the AVX-512 kernel where the CPU has it, the AVX2 one
def test_a_bf16_cache_under_float32_queries_reads_as_its_float32_widening(dim):
    """MSTAR_KV_CACHE_DTYPE=bfloat16 under float32 activations: K and V are rounded to bf16 as
    ``Tensor.to`` rounds them, and attention over the bf16 cache computes exactly what it
    computes over the same values widened to a float32 cache (float32 arithmetic in both)."""
    gen = torch.Generator().manual_seed(dim)
    cache = torch.zeros(2, 3, BLOCKS, BLOCK, dim, dtype=torch.bfloat16)
    k, v = (torch.randn(40, 3, dim, generator=gen) for _ in range(2))
    slots = torch.randperm(BLOCKS * BLOCK, generator=gen)[:40]
    fused_ops.write_kv_cache_(cache, k, v, slots)
    flat = cache.view(2, 3, BLOCKS * BLOCK, dim)
    assert torch.equal(flat[0, :, slots].transpose(0, 1), k.to(torch.bfloat16))
    assert torch.equal(flat[1, :, slots].transpose(0, 1), v.to(torch.bfloat16))
    cache = torch.randn(cache.shape, generator=gen).to(torch.bfloat16)
    contexts = [3 * BLOCK + 5, 1, BLOCK]
    tables = torch.randperm(BLOCKS, generator=gen)[:12].view(3, 4)
    q = torch.randn(3, 9, dim, generator=gen)
    got = fused_ops.paged_decode_attention(q, cache, tables, torch.tensor(contexts), None, None)
    widened = fused_ops.paged_decode_attention(q, cache.float(), tables, torch.tensor(contexts),
                                               None, None)
    assert got.dtype == torch.float32 and torch.equal(got, widened)


def test_op_refuses_a_float32_cache_under_bf16_queries():
    cache, tables = paged([5], 3, torch.float32)
    with pytest.raises(RuntimeError, match="in q's dtype or bfloat16"):
        fused_ops.paged_decode_attention(torch.randn(1, 9, DIM).to(torch.bfloat16), cache, tables,
                                         torch.tensor([5]), None, None)


def test_op_splits_many_short_sequences_in_units_of_several():
    """Short contexts make units of several (sequence, kv head) items, which the threads claim one
    at a time; 7 sequences of 3 kv heads are 21 items, so the last unit is partial."""
    contexts = [1, 2, 3, BLOCK - 1, BLOCK, 5, BLOCK + 4]
    cache, tables = paged(contexts, 3, torch.float32, seed=3)
    q = torch.randn(len(contexts), 9, DIM, generator=torch.Generator().manual_seed(3))
    got = fused_ops.paged_decode_attention(q, cache, tables, torch.tensor(contexts), None, None)
    torch.testing.assert_close(got, sdpa_reference(q, cache, tables, contexts, None, None),
                               **TOLERANCE[torch.float32])


def backend_attend(use_native: bool, q, k, v, cache, tables, contexts, chunks, dtype, window):
    """The backend's attend over decode rows (contexts) plus chunks (query len, context len):
    the last ``query len`` positions of a context of ``context len``, the rest already cached."""
    backend = TorchAttentionBackend()
    backend.use_native = use_native
    backend.kv_cache_shape(BLOCKS, BLOCK, cache.shape[1], DIM)
    nd = len(contexts)
    rows = [(1, n) for n in contexts] + chunks
    slots = [int(tables[s, p // BLOCK]) * BLOCK + p % BLOCK
             for s, (q_len, ctx) in enumerate(rows) for p in range(ctx - q_len, ctx)]
    ctxs = [ctx for _, ctx in rows]
    inputs = AttentionInputs(
        slot_mapping=torch.tensor(slots), block_tables=tables, context_lens=torch.tensor(ctxs),
        query_lens=[q_len for q_len, _ in rows], context_lens_list=ctxs, num_decodes=nd,
        block_size=BLOCK, dtype=dtype, seq_keys=list(range(len(rows))))
    meta = backend.build(inputs)
    meta.begin_forward()
    cache = cache.clone()
    return meta.attend(q, k, v, cache, window, None), cache, meta


# Chunks (query len, context len): a fresh prompt, speculative verify rows (the last token and
# its drafts over a cached context, one of them across a block boundary), and a chunk too long
# to attend as decode rows next to one short enough.
CHUNKS = [[(7, 7)], [(5, 2 * BLOCK + 3), (3, BLOCK + 1)],
          [(TOKEN_ROWS_MAX_QUERY + 1, 3 * BLOCK), (2, 9)]]


# (activations, KV cache): a bf16 cache under float32 activations is MSTAR_KV_CACHE_DTYPE's
DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
          (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize(("dtype", "cache_dtype"), DTYPES)
@pytest.mark.parametrize("window", [None, BLOCK])
@pytest.mark.parametrize("chunks", CHUNKS)
def test_backend_decode_rows_native_equal_the_torch_path(dtype, cache_dtype, window, chunks):
    """Natively, short chunks attend as decode rows (the step stays decode-only, so a model may
    run its whole stack in one call); the torch path attends them by SDPA over their pages. Both
    round K and V alike into a bf16 cache; a fresh prompt's chunk attends its own unrounded K/V
    on the torch path, so the bf16 cache's tolerance applies."""
    contexts = [BLOCK, 2 * BLOCK + 1, 5, 4 * BLOCK - 1]
    cache, tables = paged([*contexts, *(ctx for _, ctx in chunks)], 3, cache_dtype, seed=1)
    tokens = len(contexts) + sum(q_len for q_len, _ in chunks)
    q, k, v = (torch.randn(tokens, h, DIM).to(dtype) for h in (9, 3, 3))
    got, got_cache, meta = backend_attend(True, q, k, v, cache, tables, contexts, chunks, dtype,
                                          window)
    expected, expected_cache, _ = backend_attend(False, q, k, v, cache, tables, contexts, chunks,
                                                 dtype, window)
    assert meta.native_decode_only == all(q_len <= TOKEN_ROWS_MAX_QUERY for q_len, _ in chunks)
    assert got.dtype == dtype and got_cache.dtype == cache_dtype
    assert torch.equal(got_cache, expected_cache)  # the same K/V written to the same slots
    torch.testing.assert_close(got.float(), expected.float(), **TOLERANCE[cache_dtype])


@pytest.mark.parametrize("setting", [{"quantization": "q4"}, {"quantization": "int8"},
                                     {"quantization": "q4", "kv_cache_dtype": "float32"},
                                     {"quantization": "int8", "kv_cache_dtype": "bfloat16"},
                                     {"dtype": "bfloat16"},
                                     {"quantization": "q4", "dtype": "bfloat16"}])
def test_decode_stack_and_layer_in_one_call_equal_the_layer_by_layer_path(
        setting, tiny_model_dir, make_engine, run, monkeypatch, device):
    """A tiny Llama's decode steps through ``decode_stack.decode_layers`` (one native call for all
    layers), then through ``fused_ops.decode_layer`` (one per layer), generate what the
    module-by-module path generates (q4 weights with bf16 activations too: the stack widens the
    rows for the integer dot as QuantLinear does)."""
    if device != "cpu":
        pytest.skip("a CPU path")
    # no prefix caching: a cached prompt's short rest would attend as decode rows (one more
    # stacked step in the second run than in the first)
    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64, enable_prefix_caching=False,
                         **setting)
    stack_model = engine.model_runner.model.model
    layers = stack_model.layers
    if layers[0].native_linears() is None:  # bf16 on a CPU with AMX but no avx512_bf16: oneDNN
        pytest.skip("the linears run no native kernel of decode_layer's on this CPU")
    calls = {"stack": 0, "layer": 0}

    def counted(module, name):
        original = getattr(module, name)

        def call(*args):
            calls["stack" if name == "decode_layers" else "layer"] += 1
            return original(*args)

        monkeypatch.setattr(module, name, call)

    counted(llama, "decode_layers")
    counted(fused_ops, "decode_layer")
    prompts = [[5, 6, 7, 8, 9], [40, 41, 42], list(range(60, 90))]
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)

    def generate(label: str) -> list[list[int]]:
        got = run(engine, {f"{label}{i}": (p, params) for i, p in enumerate(prompts)})
        return [got[f"{label}{i}"]["token_ids"] for i in range(len(prompts))]

    stacked = generate("a")
    assert calls["stack"] and not calls["layer"]  # decode-only steps ran the stack in one call
    stack_model.native_ops = False
    layered = generate("b")
    assert calls["layer"] == calls["stack"] * len(layers)  # the same steps, a call per layer
    for layer in layers:
        layer.native_ops = False
    assert stacked == layered == generate("c")
