"""Pure-torch paged attention: works on any device, used on CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mstar.engine.attention.decode_mirror import DecodeMirror, MirrorStep
from mstar.engine.attention.inputs import AttentionInputs
from mstar.engine.attention.masks import MasksByWindow, decode_mask, prefill_mask
from mstar.models.layers.fused_ops import (
    native_ops_usable,
    paged_decode_attention,
    write_kv_cache_,
)

# Natively, a chunk of at most this many new tokens (a speculative verify row: the last token
# and its drafts) attends as that many decode rows, token j of a chunk over context c reading the
# first c - q_len + j + 1 cached positions (its own K/V written first, as for a decode row). The
# step then stays decode-only, so the model may run its whole stack in one native call.
TOKEN_ROWS_MAX_QUERY = 16


class TorchAttentionBackend:
    """Per-layer cache layout [2 (k/v), kv_heads, num_blocks, block_size, head_dim].

    Head-major blocks let one ``index_select`` gather K and V of a whole batch into
    per-head [seq, tokens, head_dim] slabs that SDPA reads without another copy.
    """

    name = "torch"

    def __init__(self) -> None:
        self._workspace = torch.empty(0)
        self.mirror = DecodeMirror()
        self.cache_slots = 0
        # The fused cache write and decode attention: None decides at the first step (after
        # loading); the benchmark sets it to compare both paths.
        self.use_native: bool | None = None

    def native(self, device: torch.device) -> bool:
        """The fused cache write and paged decode attention run (CPU, native kernels loaded)."""
        if self.use_native is None:
            self.use_native = native_ops_usable(device)
        return self.use_native

    def write_kv(self, kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
        """Token t's K and V into cache slot ``slot_mapping[t]``: one fused op on CPU when the
        native kernels are loaded, else two ``index_copy_``."""
        if self.native(kv_cache.device):
            write_kv_cache_(kv_cache, k, v, slot_mapping)
            return
        _, num_kv_heads, num_blocks, block_size, head_dim = kv_cache.shape
        flat = kv_cache.view(2, num_kv_heads, num_blocks * block_size, head_dim)
        flat[0].index_copy_(1, slot_mapping, k.transpose(0, 1).to(kv_cache.dtype))
        flat[1].index_copy_(1, slot_mapping, v.transpose(0, 1).to(kv_cache.dtype))

    def workspace(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """A reused gather buffer: a fresh multi-MB tensor per layer costs page faults."""
        numel = 1
        for n in shape:
            numel *= n
        ws = self._workspace
        if ws.numel() < numel or ws.dtype != like.dtype or ws.device != like.device:
            ws = self._workspace = torch.empty(numel, dtype=like.dtype, device=like.device)
        return ws[:numel].view(shape)

    def kv_cache_shape(self, num_blocks: int, block_size: int, num_kv_heads: int,
                       head_dim: int) -> tuple[int, ...]:
        self.cache_slots = num_blocks * block_size
        return (2, num_kv_heads, num_blocks, block_size, head_dim)

    def build(self, inputs: AttentionInputs) -> TorchAttentionMetadata:
        return TorchAttentionMetadata(self, inputs)


class TorchAttentionMetadata:
    """Per-step tensors precomputed once and reused by every layer."""

    def __init__(self, backend: TorchAttentionBackend, inputs: AttentionInputs) -> None:
        self.backend = backend
        self.slot_mapping = inputs.slot_mapping
        self.state_layout = inputs.state_layout  # read by recurrent (linear-attention) layers
        device = self.slot_mapping.device
        nd = inputs.num_decodes
        self.num_decodes = nd
        bs = inputs.block_size
        self.native_decode = backend.native(device)
        if nd:
            self.decode_tables, self.decode_lens = inputs.block_tables[:nd], inputs.context_lens[:nd]
        if nd and not self.native_decode:
            max_blocks = -(-max(inputs.context_lens_list[:nd]) // bs)
            self.decode_blocks = inputs.block_tables[:nd, :max_blocks].reshape(-1)
            self.decode_span = max_blocks * bs
            lens, span, dtype = inputs.context_lens[:nd], self.decode_span, inputs.dtype
            self.decode_masks = MasksByWindow(lambda w: decode_mask(lens, span, w, dtype))
        self.mirror_step: MirrorStep | None = None
        self.mirror_masks: MasksByWindow | None = None
        # The native decode attention reads the pages directly: no mirror.
        self._mirror_inputs = inputs if device.type == "cpu" and not self.native_decode else None
        # Prefill chunks: (token start, query len, context len, block ids).
        self.prefills = []
        start = nd
        for i in range(nd, len(inputs.query_lens)):
            q_len, ctx = inputs.query_lens[i], inputs.context_lens_list[i]
            self.prefills.append((start, q_len, ctx, inputs.block_tables[i, : -(-ctx // bs)]))
            start += q_len
        if self.prefills and self.native_decode and _as_token_rows(inputs):
            self.prefills = []
            self.decode_tables, self.decode_lens = _token_rows(inputs)
        # Only decode rows, attended natively: a layer may run whole in one native call
        # (fused_ops.decode_layer) with slot_mapping, decode_tables and decode_lens.
        self.native_decode_only = self.native_decode and bool(inputs.query_lens) and not self.prefills
        spans = inputs.bidirectional_spans or [()] * len(inputs.query_lens)
        self.prefill_masks = MasksByWindow(lambda w: [
            prefill_mask(q_len, ctx, w, device, spans[nd + i])
            for i, (_, q_len, ctx, _) in enumerate(self.prefills)])

    def begin_forward(self) -> None:
        """Called right before the forward, in execution order (metadata may be built ahead)."""
        inputs = self._mirror_inputs
        if inputs is None:
            return
        mirror = self.backend.mirror
        if not self.num_decodes:
            mirror.release()
            return
        nd = self.num_decodes
        self.mirror_step = mirror.plan(
            inputs.seq_keys[:nd], inputs.context_lens_list[:nd], inputs.block_tables[:nd],
            self.slot_mapping[:nd], inputs.block_size, self.backend.cache_slots, inputs.dtype)
        step, dtype = self.mirror_step, inputs.dtype
        if step is not None:
            self.mirror_masks = MasksByWindow(
                lambda w: step.mask if w is None else decode_mask(step.lens, step.span, w, dtype))

    def attend(self, q, k, v, kv_cache, window: int | None = None,
               scale: float | None = None) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D]; kv_cache: this layer's cache (see the backend).

        ``window``: each query sees only the last ``window`` positions (itself included);
        ``scale``: score scale (default 1/sqrt(D)).
        """
        _, num_kv_heads, _, _, head_dim = kv_cache.shape
        self.backend.write_kv(kv_cache, k, v, self.slot_mapping)
        nd = self.num_decodes
        if not self.prefills:
            return self._decode(q, kv_cache, window, scale)
        out = torch.empty_like(q)
        if nd:
            out[:nd] = self._decode(q[:nd], kv_cache, window, scale)
        masks = self.prefill_masks.get(window)
        for (start, q_len, ctx, blocks), mask in zip(self.prefills, masks, strict=True):
            qi = q[start : start + q_len].transpose(0, 1)
            if ctx == q_len:  # no cached earlier tokens: this chunk's own K/V
                ki = k[start : start + q_len].transpose(0, 1)
                vi = v[start : start + q_len].transpose(0, 1)
            else:  # widened to q's dtype where the cache is bf16 (MSTAR_KV_CACHE_DTYPE)
                kv = kv_cache.index_select(2, blocks).view(2, num_kv_heads, -1, head_dim).to(q.dtype)
                ki, vi = kv[0, :, :ctx], kv[1, :, :ctx]
            oi = F.scaled_dot_product_attention(
                qi, ki, vi, attn_mask=mask, is_causal=mask is None, enable_gqa=True, scale=scale
            )
            out[start : start + q_len] = oi.transpose(0, 1)
        return out

    def _decode(self, q, kv_cache, window: int | None, scale: float | None) -> torch.Tensor:
        """All decoding sequences at once: one SDPA with a mask over their dense K/V.

        Query heads sharing a KV head are laid out as that head's query rows, so GQA
        needs no repeated K/V. With the decode mirror, rows are in the mirror's order. On CPU
        with the native kernels, one call reads K/V from the pages instead.
        """
        if self.native_decode:
            return paged_decode_attention(q, kv_cache, self.decode_tables, self.decode_lens,
                                          window, scale)
        nd, num_heads, head_dim = q.shape
        num_kv_heads = kv_cache.shape[1]
        step = self.mirror_step
        if step is None:
            kv = self._gather(kv_cache).view(2, num_kv_heads, nd, self.decode_span, head_dim)
            mask = self.decode_masks.get(window)
        else:
            kv = self.backend.mirror.update(step, kv_cache)
            q = q.index_select(0, step.batch_of_row)
            mask = self.mirror_masks.get(window)
        kv = kv.transpose(1, 2).to(q.dtype)  # a bf16 cache under float32 queries
        qg = q.view(nd, num_kv_heads, num_heads // num_kv_heads, head_dim)
        o = F.scaled_dot_product_attention(qg, kv[0], kv[1], attn_mask=mask, scale=scale).reshape(
            nd, num_heads, head_dim)
        return o if step is None else o.index_select(0, step.row_of_batch)

    def _gather(self, kv_cache) -> torch.Tensor:
        _, num_kv_heads, _, block_size, head_dim = kv_cache.shape
        shape = (2, num_kv_heads, self.decode_blocks.numel(), block_size, head_dim)
        return torch.index_select(kv_cache, 2, self.decode_blocks,
                                  out=self.backend.workspace(shape, kv_cache))


def _as_token_rows(inputs: AttentionInputs) -> bool:
    """Every chunk is short enough to attend as decode rows (TOKEN_ROWS_MAX_QUERY) and none has
    tokens attending both ways."""
    nd, spans = inputs.num_decodes, inputs.bidirectional_spans
    return (max(inputs.query_lens[nd:]) <= TOKEN_ROWS_MAX_QUERY
            and not (spans and any(spans[nd:])))


def _token_rows(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode row per new token: its sequence's block table and the context it sees."""
    q_lens = inputs.query_lens
    lens = [ctx - q + j + 1 for q, ctx in zip(q_lens, inputs.context_lens_list, strict=True)
            for j in range(q)]
    tables = inputs.block_tables
    repeats = torch.tensor(q_lens, device=tables.device)
    return (tables.repeat_interleave(repeats, dim=0),
            torch.tensor(lens, dtype=torch.int64).to(tables.device))
