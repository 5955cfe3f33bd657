"""Pure-torch paged attention: works on any device, used on CPU."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mstar.engine.attention.decode_mirror import DecodeMirror
from mstar.engine.attention.inputs import AttentionInputs


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
        device = self.slot_mapping.device
        nd = inputs.num_decodes
        self.num_decodes = nd
        bs = inputs.block_size
        if nd:
            max_blocks = -(-max(inputs.context_lens_list[:nd]) // bs)
            self.decode_blocks = inputs.block_tables[:nd, :max_blocks].reshape(-1)
            self._decode_keys = torch.arange(max_blocks * bs, device=device)
            self._decode_ctx = inputs.context_lens[:nd, None]
            self.decode_span = max_blocks * bs
        self._dtype = inputs.dtype
        # Masks per sliding window (None: full causal), built on first use by a layer.
        self._decode_masks: dict[int | None, torch.Tensor] = {}
        self._prefill_masks: dict[int | None, list] = {}
        self.decode_mode = "gather"
        self._mirror_inputs = inputs if device.type == "cpu" else None
        # Prefill chunks: (token start, query len, context len, block ids).
        self.prefills = []
        start = nd
        for i in range(nd, len(inputs.query_lens)):
            q_len, ctx = inputs.query_lens[i], inputs.context_lens_list[i]
            blocks = inputs.block_tables[i, : -(-ctx // bs)]
            self.prefills.append((start, q_len, ctx, blocks))
            start += q_len

    def begin_forward(self) -> None:
        """Called right before the forward, in execution order (metadata may be built ahead)."""
        inputs = self._mirror_inputs
        if inputs is None:
            return
        if not self.num_decodes:
            self.backend.mirror.release()
            return
        nd, mirror = self.num_decodes, self.backend.mirror
        self.decode_mode = mirror.plan(
            tuple(inputs.seq_keys[:nd]), inputs.context_lens_list[:nd], self.decode_span,
            inputs.block_size, self.backend.cache_slots,
        )
        if self.decode_mode == "append":
            rows = torch.arange(nd, device=self.slot_mapping.device) * mirror.capacity
            self.append_index = rows + inputs.context_lens[:nd] - 1

    def decode_mask(self, window: int | None) -> torch.Tensor:
        """Additive [seqs, 1, 1, span] mask: keys past each context (and before its window)."""
        mask = self._decode_masks.get(window)
        if mask is None:
            masked = self._decode_keys >= self._decode_ctx
            if window is not None:
                masked |= self._decode_keys < self._decode_ctx - window
            # Additive float mask: cheaper than a boolean one in the CPU SDPA kernel.
            mask = torch.zeros(masked.shape, dtype=self._dtype, device=masked.device)
            mask.masked_fill_(masked, float("-inf"))
            mask = self._decode_masks[window] = mask.view(self.num_decodes, 1, 1, -1)
        return mask

    def prefill_masks(self, window: int | None) -> list[torch.Tensor | None]:
        """Per prefill chunk: None for plain causal over its own tokens, else a boolean mask
        [query, context] (causal with an offset; only the last ``window`` keys if windowed)."""
        masks = self._prefill_masks.get(window)
        if masks is None:
            masks = self._prefill_masks[window] = [
                self._prefill_mask(q_len, ctx, window) for _, q_len, ctx, _ in self.prefills
            ]
        return masks

    def _prefill_mask(self, q_len: int, ctx: int, window: int | None) -> torch.Tensor | None:
        windowed = window is not None and window < ctx
        if ctx == q_len and not windowed:
            return None
        device = self.slot_mapping.device
        q_pos = torch.arange(ctx - q_len, ctx, device=device)[:, None]
        k_pos = torch.arange(ctx, device=device)[None, :]
        mask = k_pos <= q_pos
        if windowed:
            mask &= k_pos > q_pos - window
        return mask

    def attend(self, q, k, v, kv_cache, window: int | None = None,
               scale: float | None = None) -> torch.Tensor:
        """q: [T, Hq, D]; k, v: [T, Hkv, D]; kv_cache: this layer's cache (see the backend).

        ``window``: each query sees only the last ``window`` positions (itself included);
        ``scale``: score scale (default 1/sqrt(D)).
        """
        _, num_kv_heads, num_blocks, block_size, head_dim = kv_cache.shape
        flat = kv_cache.view(2, num_kv_heads, num_blocks * block_size, head_dim)
        flat[0].index_copy_(1, self.slot_mapping, k.transpose(0, 1))
        flat[1].index_copy_(1, self.slot_mapping, v.transpose(0, 1))
        nd = self.num_decodes
        if not self.prefills:
            return self._decode(q, kv_cache, window, scale)
        out = torch.empty_like(q)
        if nd:
            out[:nd] = self._decode(q[:nd], kv_cache, window, scale)
        masks = self.prefill_masks(window)
        for (start, q_len, ctx, blocks), mask in zip(self.prefills, masks, strict=True):
            qi = q[start : start + q_len].transpose(0, 1)
            if ctx == q_len:  # no cached earlier tokens: this chunk's own K/V
                ki = k[start : start + q_len].transpose(0, 1)
                vi = v[start : start + q_len].transpose(0, 1)
            else:
                kv = kv_cache.index_select(2, blocks).view(2, num_kv_heads, -1, head_dim)
                ki, vi = kv[0, :, :ctx], kv[1, :, :ctx]
            oi = F.scaled_dot_product_attention(
                qi, ki, vi, attn_mask=mask, is_causal=mask is None, enable_gqa=True, scale=scale
            )
            out[start : start + q_len] = oi.transpose(0, 1)
        return out

    def _decode(self, q, kv_cache, window: int | None, scale: float | None) -> torch.Tensor:
        """All decoding sequences at once: one SDPA with a mask over their dense K/V.

        Query heads sharing a KV head are laid out as that head's query rows, so GQA
        needs no repeated K/V.
        """
        nd, num_heads, head_dim = q.shape
        num_kv_heads = kv_cache.shape[1]
        span = self.decode_span
        if self.decode_mode == "gather":
            kv = self._gather(kv_cache).view(2, num_kv_heads, nd, span, head_dim)
        else:
            mirror = self.backend.mirror
            buf = mirror.buffer(kv_cache, nd)
            if self.decode_mode == "rebuild":
                gathered = self._gather(kv_cache).view(2, num_kv_heads, nd, span, head_dim)
                buf[:, :, :, :span].copy_(gathered)
            else:  # append this step's token, already in the paged cache, to the buffer
                flat = buf.view(2, num_kv_heads, nd * mirror.capacity, head_dim)
                flat.index_copy_(2, self.append_index, self._new_kv(kv_cache))
            kv = buf[:, :, :, :span]
        kv = kv.transpose(1, 2)
        qg = q.view(nd, num_kv_heads, num_heads // num_kv_heads, head_dim)
        o = F.scaled_dot_product_attention(qg, kv[0], kv[1], attn_mask=self.decode_mask(window),
                                           scale=scale)
        return o.reshape(nd, num_heads, head_dim)

    def _gather(self, kv_cache) -> torch.Tensor:
        _, num_kv_heads, _, block_size, head_dim = kv_cache.shape
        shape = (2, num_kv_heads, self.decode_blocks.numel(), block_size, head_dim)
        return torch.index_select(kv_cache, 2, self.decode_blocks,
                                  out=self.backend.workspace(shape, kv_cache))

    def _new_kv(self, kv_cache) -> torch.Tensor:
        """K/V of the decode tokens just written, read back from their cache slots."""
        _, num_kv_heads, num_blocks, block_size, head_dim = kv_cache.shape
        flat = kv_cache.view(2, num_kv_heads, num_blocks * block_size, head_dim)
        return flat.index_select(2, self.slot_mapping[: self.num_decodes])
