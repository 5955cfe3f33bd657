"""Dense per-layer copy of the decode batch's K/V, kept up to date across steps.

Gathering every decoding sequence's pages each layer and step is pure memory
traffic. While the set of decoding sequences stays the same, each step only adds
one token per sequence, so the torch backend appends that token to a dense
[2, kv_heads, seqs, capacity, head_dim] buffer per layer instead of re-gathering.
Any change (a sequence joins, finishes, is preempted, or outgrows the capacity)
rebuilds the buffer with one gather. Used on CPU, where the gather is expensive.
"""

from __future__ import annotations

import torch

# Tokens of room left per sequence at a rebuild, so rebuilds happen rarely.
HEADROOM_TOKENS = 64
# The mirror may use at most this fraction of the KV cache's token slots.
MAX_FRACTION_OF_CACHE = 0.5


class DecodeMirror:
    def __init__(self) -> None:
        self.keys: tuple[int, ...] | None = None
        self.ctx: list[int] = []
        self.capacity = 0
        self.buffers: dict[int, torch.Tensor] = {}  # per layer, keyed by its cache's data_ptr

    def plan(self, keys: tuple[int, ...], ctx: list[int], span: int, block_size: int,
             cache_slots: int) -> str:
        """'append' (one new token each), 'rebuild' (gather into the buffer) or 'gather'."""
        grew_by_one = keys == self.keys and all(
            c == p + 1 for c, p in zip(ctx, self.ctx, strict=True)
        )
        self.keys, self.ctx = keys, ctx
        if grew_by_one and span <= self.capacity:
            return "append"
        capacity = -(-(span + HEADROOM_TOKENS) // block_size) * block_size
        if len(keys) * capacity > cache_slots * MAX_FRACTION_OF_CACHE:
            self.release()
            return "gather"
        self.capacity = capacity
        return "rebuild"

    def release(self) -> None:
        """No sequence is decoding: drop the buffers; the next decode step rebuilds."""
        self.keys, self.ctx, self.capacity = None, [], 0
        self.buffers.clear()

    def buffer(self, kv_cache: torch.Tensor, num_seqs: int) -> torch.Tensor:
        _, num_kv_heads, _, _, head_dim = kv_cache.shape
        shape = (2, num_kv_heads, num_seqs, self.capacity, head_dim)
        key = kv_cache.data_ptr()
        buf = self.buffers.get(key)
        if buf is None or buf.shape != shape:
            # Zeroed: slots past a sequence's length are masked, but a masked NaN poisons SDPA.
            buf = self.buffers[key] = kv_cache.new_zeros(shape)
        return buf
