"""Paged prefill/extend attention: chunks of new tokens against their sequence's cached K/V.

The new tokens' K/V are already in the cache (the backend stores them first), so a chunk that
extends a cached prefix and a fresh prompt are the same case: query ``m`` of a chunk of length
``q_len`` sits at position ``ctx - q_len + m`` and attends causally to cache tokens
``0 .. ctx - q_len + m``. One program handles ``BLOCK_M`` queries of one head of one sequence:
a flash-attention loop over ``BLOCK_N``-token K/V tiles gathered through the block table.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M = 64  # queries per program
BLOCK_N = 64  # tokens per K/V tile
# Read when the kernel is decorated, as @triton.jit does: the kernel is interpreted for good.
INTERPRETING = bool(triton.knobs.runtime.interpret)


@triton.jit
def _paged_prefill_kernel(
    out_ptr, q_ptr, cache_ptr, block_tables_ptr, q_starts_ptr, q_lens_ptr, context_lens_ptr, scale,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_ckv, stride_ch, stride_cb, stride_cs, stride_bt,
    BLOCK_SIZE: tl.constexpr, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    seq = tl.program_id(0)
    tile = tl.program_id(1)
    head = tl.program_id(2)
    q_len = tl.load(q_lens_ptr + seq)
    if tile * BLOCK_M < q_len:
        ctx = tl.load(context_lens_ptr + seq)
        q_start = tl.load(q_starts_ptr + seq)
        m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        d = tl.arange(0, BLOCK_D)
        d_mask = d < HEAD_DIM
        q_mask = (m < q_len)[:, None] & d_mask[None, :]
        q_off = (q_start + m)[:, None] * stride_qt + head * stride_qh + d[None, :]
        q = tl.load(q_ptr + q_off, mask=q_mask, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        pos = ctx - q_len + m
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        k_base = cache_ptr + (head // GROUP).to(tl.int64) * stride_ch
        end = tl.minimum(ctx, ctx - q_len + (tile + 1) * BLOCK_M)
        for start in range(0, end, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            n_mask = n < ctx
            block = tl.load(block_tables_ptr + seq * stride_bt + n // BLOCK_SIZE, mask=n_mask,
                            other=0)
            tok_off = block.to(tl.int64) * stride_cb + (n % BLOCK_SIZE) * stride_cs
            kv_off = tok_off[:, None] + d[None, :]
            kv_mask = n_mask[:, None] & d_mask[None, :]
            k = tl.load(k_base + kv_off, mask=kv_mask, other=0.0)
            v = tl.load(k_base + stride_ckv + kv_off, mask=kv_mask, other=0.0)
            if UPCAST:
                k, v = k.to(tl.float32), v.to(tl.float32)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            s = tl.where((n[None, :] <= pos[:, None]) & n_mask[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new
        out = acc / l_i[:, None]
        o_off = (q_start + m)[:, None] * stride_ot + head * stride_oh + d[None, :]
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=q_mask)


def paged_prefill_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                            q_starts: torch.Tensor, q_lens: torch.Tensor, context_lens: torch.Tensor,
                            max_q_len: int, out: torch.Tensor) -> torch.Tensor:
    """q, out: [tokens, q_heads, head_dim]; sequence i's ``q_lens[i]`` queries start at row
    ``q_starts[i]`` and are the last of its ``context_lens[i]`` cached tokens."""
    _, num_heads, head_dim = q.shape
    _, num_kv_heads, _, block_size, _ = kv_cache.shape
    grid = (q_lens.numel(), triton.cdiv(max_q_len, BLOCK_M), num_heads)
    _paged_prefill_kernel[grid](
        out, q, kv_cache, block_tables, q_starts, q_lens, context_lens, head_dim ** -0.5,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3),
        block_tables.stride(0),
        BLOCK_SIZE=block_size, GROUP=num_heads // num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        # fp32 must not drop to tf32 on the tensor cores: greedy parity is checked in fp32.
        PRECISION="ieee" if q.dtype == torch.float32 or INTERPRETING else "tf32",
        # Triton's interpreter multiplies bf16 operands as raw integers (3.7): use fp32 there.
        UPCAST=INTERPRETING,
    )
    return out
