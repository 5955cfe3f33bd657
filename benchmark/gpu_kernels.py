"""Triton kernels versus the torch code they replace, timed at the built-in model's shapes.

    python3 -m benchmark.gpu_kernels          # needs CUDA; part of scripts/gpu_check.sh

One layer's worth of each operation in bf16 (9 query heads, 3 KV heads, head dim 64, hidden 576,
intermediate 1536, block size 16), microseconds per call (CUDA events, median of 50 after a
warm-up). Decides whether prefill stays on the Triton kernel or goes back to SDPA, and whether the
fused norm/rope/SiLU kernels are worth wiring into the models.
"""

from __future__ import annotations

import statistics

import torch

from mstar.engine.attention import AttentionInputs, get_backend
from mstar.kernels.activation import silu_and_mul
from mstar.kernels.norm import rms_norm
from mstar.kernels.rope import apply_rope
from mstar.models.layers.blocks import RMSNorm, RotaryEmbedding, SiluAndMul
from mstar.models.layers.blocks import apply_rope as torch_apply_rope

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE, BLOCK = 9, 3, 64, 576, 1536, 16
DTYPE, DEVICE = torch.bfloat16, torch.device("cuda")


def time_us(fn, iters: int = 50) -> float:
    fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000)
    return statistics.median(times)


def attention_case(query_lens: list[int], ctx_lens: list[int]):
    """AttentionInputs, q/k/v and a cache for sequences laid out in consecutive blocks."""
    tables, slots, next_block = [], [], 0
    for q_len, ctx in zip(query_lens, ctx_lens, strict=True):
        n = -(-ctx // BLOCK)
        tables.append(list(range(next_block, next_block + n)))
        slots += [tables[-1][p // BLOCK] * BLOCK + p % BLOCK for p in range(ctx - q_len, ctx)]
        next_block += n
    width = max(map(len, tables))
    tables = [t + [0] * (width - len(t)) for t in tables]
    tokens = sum(query_lens)
    cache = torch.randn(2, KV_HEADS, next_block, BLOCK, HEAD_DIM, device=DEVICE, dtype=DTYPE)
    q = torch.randn(tokens, HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE)
    k, v = (torch.randn(tokens, KV_HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE) for _ in "kv")
    num_decodes = sum(1 for q_len in query_lens if q_len == 1)
    inputs = AttentionInputs(
        slot_mapping=torch.tensor(slots, device=DEVICE), block_tables=torch.tensor(tables, device=DEVICE),
        context_lens=torch.tensor(ctx_lens, device=DEVICE), query_lens=query_lens,
        context_lens_list=ctx_lens, num_decodes=num_decodes, block_size=BLOCK, dtype=DTYPE,
        seq_keys=list(range(len(ctx_lens))))
    return inputs, q, k, v, cache


def attention_us(backend: str, case) -> float:
    """One layer's attention call, metadata built once (as for every layer of a step)."""
    inputs, q, k, v, cache = case
    metadata = get_backend(backend).build(inputs)
    metadata.begin_forward()
    return time_us(lambda: metadata.attend(q, k, v, cache))


def elementwise_rows(tokens: int) -> list[tuple[str, float, float]]:
    x, residual = (torch.randn(tokens, HIDDEN, device=DEVICE, dtype=DTYPE) for _ in "xr")
    norm = RMSNorm(HIDDEN, 1e-5).to(DEVICE, DTYPE)
    rotary = RotaryEmbedding(HEAD_DIM, 2048, {"rope_theta": 10000.0})
    rotary.init_cache(DEVICE, DTYPE)
    positions = torch.arange(tokens, device=DEVICE)
    qk = torch.randn(tokens, HEADS + KV_HEADS, HEAD_DIM, device=DEVICE, dtype=DTYPE)
    gate_up = torch.randn(tokens, 2 * INTERMEDIATE, device=DEVICE, dtype=DTYPE)
    return [
        (f"add + rms_norm, {tokens} tokens", time_us(lambda: norm(x, residual)),
         time_us(lambda: rms_norm(x, norm.weight, norm.eps, residual))),
        (f"rope (cos/sin gather included), {tokens} tokens",
         time_us(lambda: torch_apply_rope(qk, *rotary(positions))),
         time_us(lambda: apply_rope(qk, positions, rotary.cos_sin))),
        (f"silu * mul, {tokens} tokens", time_us(lambda: SiluAndMul()(gate_up)),
         time_us(lambda: silu_and_mul(gate_up))),
    ]


def main() -> None:
    rows = []
    attention = {
        "decode, 1 seq, ctx 160": ([1], [160]),
        "decode, 32 seqs, ctx 160": ([1] * 32, [160] * 32),
        "decode, 256 seqs, ctx 160": ([1] * 256, [160] * 256),
        "decode, 256 seqs, ctx 1024": ([1] * 256, [1024] * 256),
        "prefill, 32 x 32 tokens": ([32] * 32, [32] * 32),
        "prefill, 8 x 512 tokens": ([512] * 8, [512] * 8),
        "extend, 8 x 256 after 768 cached": ([256] * 8, [1024] * 8),
    }
    for label, (query_lens, ctx_lens) in attention.items():
        case = attention_case(query_lens, ctx_lens)
        rows.append((f"attention {label}", attention_us("torch", case), attention_us("triton", case)))
    for tokens in (32, 256):
        rows += elementwise_rows(tokens)
    print(f"\n{'operation (bf16, one layer)':48} {'torch us':>10} {'triton us':>10}")
    for label, torch_us, triton_us in rows:
        print(f"{label:48} {torch_us:>10.1f} {triton_us:>10.1f}")


if __name__ == "__main__":
    main()
