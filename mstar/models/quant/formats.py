"""Weight-only quantized layouts and their exact dequantization (the reference every kernel matches).

q4 is GGUF's Q4_1 byte layout, so a Q4_1 tensor of a GGUF file is used as is: per output row,
blocks of 20 bytes for 32 weights (fp16 scale d, fp16 minimum m, 16 bytes of nibbles where byte j
holds weight j in its low nibble and weight j + 16 in its high nibble); weight = q * d + m. The
native kernels take the same bytes repacked once at load (``interleave_q4``, csrc/q4_layout.h):
8 output rows interleaved per block, so that one vector instruction works on 8 outputs.

int8 is int8 weights [N, K] with float32 scales [N, G] for groups of K / G weights: G = 1 is
per-output-channel (what quantizing a dense checkpoint produces), K / 32 is GGUF's Q8_0.

Activations are quantized too before the integer-dot kernels multiply them with these weights:
int16 per block of 32 with scale max|x| / 32767, rounded half to even (llama.cpp's Q8_1 layout,
with 16 bits: 8 bits moved the built-in model's greedy answers); ``round_activations`` is that
rounding in torch, the reference the kernels match.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Q4_BLOCK = 32
Q4_BLOCK_BYTES = 20
ACTIVATION_MAX = 32767  # activations are rounded to int16 per block of 32


@dataclass
class Q4Weight:
    blocks: torch.Tensor  # uint8 [N, K / 32 * 20]
    in_features: int
    interleaved: bool = False  # the native kernels' x8 groups (interleave_q4), else Q4_1 rows


@dataclass
class Int8Weight:
    weight: torch.Tensor  # int8 [N, K]
    scales: torch.Tensor  # float32 [N, G]


QuantWeight = Q4Weight | Int8Weight


def quantize_q4(weight: torch.Tensor) -> Q4Weight:
    """Q4_1 blocks of a dense [N, K] weight, rounded the way ggml's quantize_row_q4_1 rounds."""
    n, k = weight.shape
    w = weight.detach().float().reshape(n, k // Q4_BLOCK, Q4_BLOCK)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    d = (hi - lo) / 15
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    q = torch.floor((w - lo) * inv + 0.5).clamp_(0, 15).to(torch.uint8)
    return q4_from_parts(d.half(), lo.half(), q)


def q4_from_parts(d: torch.Tensor, m: torch.Tensor, q: torch.Tensor) -> Q4Weight:
    """Pack fp16 d, m [N, B, 1] and 4-bit values q [N, B, 32] (uint8) into Q4_1 blocks."""
    n, blocks, _ = q.shape
    nibbles = q[..., :16] | (q[..., 16:] << 4)
    packed = torch.cat([d.view(torch.uint8), m.view(torch.uint8), nibbles], dim=-1)
    return Q4Weight(packed.reshape(n, blocks * Q4_BLOCK_BYTES).contiguous(), blocks * Q4_BLOCK)


GROUP_ROWS = 8  # output rows interleaved per block in the native kernels' layout
GROUP_CHUNKS = 8  # 16-byte chunks of nibbles per block and group


def interleave_q4(w: Q4Weight) -> Q4Weight:
    """The native kernels' layout (csrc/q4_layout.h): per group of 8 rows and block of 32 weights,
    the 8 fp16 scales, the 8 fp16 minimums, then 8 chunks of 16 bytes where chunk j holds the
    16-bit nibble word j of each row (weights 2j, 2j + 1 low, 2j + 16, 2j + 17 high). The same
    bytes in another order; the last N % 8 rows stay Q4_1 rows."""
    if w.interleaved:
        return w
    n, row_bytes = w.blocks.shape
    full = n // GROUP_ROWS * GROUP_ROWS
    g = w.blocks[:full].view(-1, GROUP_ROWS, row_bytes // Q4_BLOCK_BYTES, Q4_BLOCK_BYTES).transpose(1, 2)
    d, m = g[..., 0:2], g[..., 2:4]  # [G, blocks, 8 rows, 2 bytes]
    words = g[..., 4:].reshape(*g.shape[:3], GROUP_CHUNKS, 2).transpose(2, 3)  # [G, blocks, chunk, row, 2]
    packed = torch.cat([d.flatten(2), m.flatten(2), words.flatten(2)], dim=-1)
    blocks = torch.cat([packed.reshape(full, row_bytes), w.blocks[full:]])
    return Q4Weight(blocks, w.in_features, interleaved=True)


def deinterleave_q4(w: Q4Weight) -> Q4Weight:
    """Q4_1 rows of an interleaved weight (the inverse of ``interleave_q4``)."""
    if not w.interleaved:
        return w
    n, row_bytes = w.blocks.shape
    full, nb = n // GROUP_ROWS * GROUP_ROWS, row_bytes // Q4_BLOCK_BYTES
    g = w.blocks[:full].view(-1, nb, GROUP_ROWS * Q4_BLOCK_BYTES)
    d = g[..., :2 * GROUP_ROWS].reshape(-1, nb, GROUP_ROWS, 2)
    m = g[..., 2 * GROUP_ROWS:4 * GROUP_ROWS].reshape(-1, nb, GROUP_ROWS, 2)
    words = g[..., 4 * GROUP_ROWS:].reshape(-1, nb, GROUP_CHUNKS, GROUP_ROWS, 2).transpose(2, 3)
    rows = torch.cat([d, m, words.flatten(3)], dim=-1).transpose(1, 2)  # [G, 8 rows, blocks, 20]
    return Q4Weight(torch.cat([rows.reshape(full, row_bytes), w.blocks[full:]]), w.in_features)


def dequantize_q4(w: Q4Weight) -> torch.Tensor:
    w = deinterleave_q4(w)
    n = w.blocks.shape[0]
    blocks = w.blocks.view(n, -1, Q4_BLOCK_BYTES)
    d = blocks[..., 0:2].contiguous().view(torch.float16).float()
    m = blocks[..., 2:4].contiguous().view(torch.float16).float()
    qs = blocks[..., 4:]
    q = torch.cat([qs & 0x0F, qs >> 4], dim=-1).float()
    return (q * d + m).reshape(n, w.in_features)


def quantize_int8(weight: torch.Tensor) -> Int8Weight:
    """Symmetric per-output-channel int8: scale = max |w| / 127 per row."""
    w = weight.detach().float()
    scales = (w.abs().amax(-1, keepdim=True) / 127).clamp_(min=torch.finfo(torch.float32).tiny)
    q = torch.round(w / scales).clamp_(-127, 127).to(torch.int8)
    return Int8Weight(q.contiguous(), scales.contiguous())


def dequantize_int8(w: Int8Weight) -> torch.Tensor:
    n, k = w.weight.shape
    groups = w.scales.shape[1]
    q = w.weight.float().view(n, groups, k // groups)
    return (q * w.scales.unsqueeze(-1)).reshape(n, k)


def round_activations(x: torch.Tensor) -> torch.Tensor:
    """float32 x [M, K] as the kernels see it: int16 per block of 32 times max|x| / 32767."""
    m, k = x.shape
    blocks = x.view(m, k // Q4_BLOCK, Q4_BLOCK)
    amax = blocks.abs().amax(-1, keepdim=True)
    # A true division, as the kernels' 32767 / a: ``ACTIVATION_MAX / amax`` is computed by torch as
    # reciprocal(amax) * 32767, rounded twice, which moves a product near .5 to the other integer.
    inv = torch.where(amax > 0, torch.full_like(amax, ACTIVATION_MAX).div(amax), torch.zeros_like(amax))
    return ((blocks * inv).round() * (amax / ACTIVATION_MAX)).view(m, k)


def dequantize(w: QuantWeight) -> torch.Tensor:
    return dequantize_q4(w) if isinstance(w, Q4Weight) else dequantize_int8(w)


def select_rows(w: QuantWeight, index: torch.Tensor) -> QuantWeight:
    """The rows ``index`` of a quantized weight (an embedding lookup in a tied LM head)."""
    if isinstance(w, Q4Weight):
        return Q4Weight(deinterleave_q4(w).blocks.index_select(0, index), w.in_features)
    return Int8Weight(w.weight.index_select(0, index), w.scales.index_select(0, index))


def part_rows(w: QuantWeight) -> int:
    return w.blocks.shape[0] if isinstance(w, Q4Weight) else w.weight.shape[0]


def same_layout(parts: list[QuantWeight]) -> bool:
    """True when ``parts`` can be stacked into one weight (same kind, same int8 grouping)."""
    if all(isinstance(p, Q4Weight) for p in parts):
        return True
    return all(isinstance(p, Int8Weight) for p in parts) and \
        len({p.scales.shape[1] for p in parts}) == 1


def concat_rows(parts: list[QuantWeight]) -> QuantWeight:
    """Stack row-wise (fused q/k/v or gate/up); exact, the blocks are per row."""
    if not same_layout(parts):
        raise ValueError("cannot stack weights of different quantized layouts")
    if isinstance(parts[0], Q4Weight):
        return Q4Weight(torch.cat([deinterleave_q4(p).blocks for p in parts]), parts[0].in_features)
    return Int8Weight(torch.cat([p.weight for p in parts]), torch.cat([p.scales for p in parts]))
