"""Paged decode attention: one new query token per sequence against its cached K/V.

The cache is the torch backend's layout, per layer [2 (k/v), kv_heads, num_blocks, block_size,
head_dim]. One program handles one sequence and one KV head with all the query heads that share
it (GQA), so each K/V tile is read once per group. It walks the sequence's block table in tiles
of ``BLOCK_N`` tokens with an online softmax. A row with context length 0 (a padding row of a
CUDA-graph batch) outputs zeros.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_N = 32  # tokens per K/V tile


@triton.jit
def _paged_decode_kernel(
    out_ptr, q_ptr, cache_ptr, block_tables_ptr, context_lens_ptr, scale,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_ckv, stride_ch, stride_cb, stride_cs, stride_bt,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    ctx = tl.load(context_lens_ptr + seq)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * GROUP + g
    q_mask = (g < GROUP)[:, None] & (d < HEAD_DIM)[None, :]
    q_off = seq * stride_qt + heads[:, None] * stride_qh + d[None, :]
    q = tl.load(q_ptr + q_off, mask=q_mask, other=0.0).to(tl.float32) * scale
    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], tl.float32)
    k_base = cache_ptr + kv_head.to(tl.int64) * stride_ch  # a layer's cache may pass 2**31 elements
    for start in range(0, ctx, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < ctx
        block = tl.load(block_tables_ptr + seq * stride_bt + n // BLOCK_SIZE, mask=n_mask, other=0)
        tok_off = block.to(tl.int64) * stride_cb + (n % BLOCK_SIZE) * stride_cs
        kv_off = tok_off[:, None] + d[None, :]
        kv_mask = n_mask[:, None] & (d < HEAD_DIM)[None, :]
        k = tl.load(k_base + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(k_base + stride_ckv + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)
        s = tl.where(n_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    o_off = seq * stride_ot + heads[:, None] * stride_oh + d[None, :]
    tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=q_mask)


def paged_decode_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """q, out: [seqs, q_heads, head_dim] (last dim contiguous); sequence i's query attends to its
    first ``context_lens[i]`` cached tokens, found through row i of ``block_tables``."""
    num_seqs, num_heads, head_dim = q.shape
    _, num_kv_heads, _, block_size, _ = kv_cache.shape
    group = num_heads // num_kv_heads
    _paged_decode_kernel[(num_seqs, num_kv_heads)](
        out, q, kv_cache, block_tables, context_lens, head_dim ** -0.5,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3),
        block_tables.stride(0),
        BLOCK_SIZE=block_size, GROUP=group, GROUP_PAD=triton.next_power_of_2(group),
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_N=BLOCK_N,
    )
    return out
