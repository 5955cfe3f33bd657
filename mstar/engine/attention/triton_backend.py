"""Paged attention in Triton kernels (``mstar.kernels``): the CUDA fast path.

Same cache layout as the torch backend, so models and the KV-cache allocation do not change.
Every step is three launches per layer at most: store the new K/V, decode attention for the
leading one-token sequences, prefill/extend attention for the chunks after them. The metadata
holds only tensors and launch sizes, so a CUDA graph captured over static input buffers replays
it (padding rows: slot -1, context length 0).
"""

from __future__ import annotations

import torch

from mstar.engine.attention.inputs import AttentionInputs
from mstar.kernels.kv_store import store_kv
from mstar.kernels.paged_decode import paged_decode_attention
from mstar.kernels.paged_prefill import paged_prefill_attention


class TritonAttentionBackend:
    """Per-layer cache layout [2 (k/v), kv_heads, num_blocks, block_size, head_dim]."""

    name = "triton"

    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int,
                       head_dim: int) -> tuple[int, ...]:
        return (2, num_kv_heads, num_blocks, block_size, head_dim)

    def build(self, inputs: AttentionInputs) -> TritonAttentionMetadata:
        return TritonAttentionMetadata(inputs)


class TritonAttentionMetadata:
    def __init__(self, inputs: AttentionInputs) -> None:
        nd = self.num_decodes = inputs.num_decodes
        self.slot_mapping = inputs.slot_mapping
        self.state_layout = inputs.state_layout  # read by recurrent (linear-attention) layers
        self.block_tables = inputs.block_tables
        self.context_lens = inputs.context_lens
        q_lens = inputs.query_lens[nd:]
        self.max_prefill_len = max(q_lens, default=0)
        if q_lens:
            starts = [sum(q_lens[:i]) for i in range(len(q_lens))]
            device = self.slot_mapping.device
            self.prefill_starts = torch.tensor(starts).to(device, non_blocking=True)
            self.prefill_lens = torch.tensor(q_lens).to(device, non_blocking=True)

    def begin_forward(self) -> None:
        """Nothing is carried across steps."""

    def attend(self, q, k, v, kv_cache, window: int | None = None,
               scale: float | None = None) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D]; kv_cache: this layer's cache. No sliding window
        or custom scale (``choose_attention_backend`` keeps such models on the torch backend)."""
        store_kv(k, v, kv_cache, self.slot_mapping)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        nd = self.num_decodes
        if nd:
            paged_decode_attention(q[:nd], kv_cache, self.block_tables[:nd],
                                   self.context_lens[:nd], out[:nd])
        if self.max_prefill_len:
            paged_prefill_attention(q[nd:], kv_cache, self.block_tables[nd:], self.prefill_starts,
                                    self.prefill_lens, self.context_lens[nd:],
                                    self.max_prefill_len, out[nd:])
        return out
