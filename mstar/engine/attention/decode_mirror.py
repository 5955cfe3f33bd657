"""Dense per-layer copy of the decoding sequences' K/V, updated incrementally across steps (CPU).

Gathering every decoding sequence's pages each layer and step is pure memory traffic. Instead the
torch backend keeps, per layer, a dense buffer [2, kv_heads, rows, capacity, head_dim] with one row
per decoding sequence, and each step only:

- appends the one new token of every sequence that kept decoding (*appenders*);
- compacts the rows of sequences that left (finished, preempted, or now prefilling) by moving the
  last rows into their holes;
- gathers the pages of sequences that joined (*joiners*) into fresh rows.

So continuous batching, where sequences come and go every few steps, costs a few row copies, not a
rebuild of the whole buffer. Rows are not in batch order: the backend permutes the queries into
row order and the outputs back. A full rebuild (every sequence a joiner) happens only when the
buffer must grow (more rows, or a sequence outgrew the capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.attention.masks import decode_mask

# Tokens of room added per row at a (re)allocation, so reallocations happen rarely.
HEADROOM_TOKENS = 128
ROW_ALIGN = 8
# The mirror may use at most this fraction of the KV cache's token slots.
MAX_FRACTION_OF_CACHE = 0.5


@dataclass
class MirrorStep:
    """What every layer does to its buffer this step (computed once, in execution order)."""

    num_rows: int
    span: int  # columns attended: the longest context
    move_src: torch.Tensor | None  # compaction: rows copied src -> dst (disjoint sets)
    move_dst: torch.Tensor | None
    append_index: torch.Tensor | None  # flat (row * capacity + position) of appended tokens
    append_slots: torch.Tensor | None  # their paged-cache slots
    join_start: int  # joiners fill rows join_start .. num_rows - 1
    join_blocks: torch.Tensor | None  # [joiners * join_span_blocks] page ids, flattened
    join_span: int  # tokens gathered per joiner (a whole number of blocks)
    row_of_batch: torch.Tensor  # [nd]: decode row i of the batch lives in this row
    batch_of_row: torch.Tensor  # [num_rows]: inverse permutation
    mask: torch.Tensor  # [num_rows, 1, 1, span] additive: -inf past each row's context
    lens: torch.Tensor  # [num_rows]: each row's context (windowed layers mask from it)


class DecodeMirror:
    def __init__(self) -> None:
        self.keys: list[int] = []  # seq key per row
        self.lens: list[int] = []  # tokens mirrored per row
        self.num_rows_alloc = 0
        self.capacity = 0
        self.buffers: dict[int, torch.Tensor] = {}  # per layer, keyed by its cache's data_ptr

    def release(self) -> None:
        """Forget every row (a step without decodes, or the mirror would be too big)."""
        self.keys, self.lens = [], []
        self.num_rows_alloc = self.capacity = 0
        self.buffers.clear()

    def plan(self, keys: list[int], ctx: list[int], block_tables: torch.Tensor,
             slots: torch.Tensor, block_size: int, cache_slots: int,
             dtype: torch.dtype) -> MirrorStep | None:
        """This step's instructions, or None when the mirror would exceed its memory share."""
        device = slots.device
        span = max(ctx)
        need_rows = -(-len(keys) // ROW_ALIGN) * ROW_ALIGN
        rebuild = span > self.capacity or need_rows > self.num_rows_alloc
        if rebuild:
            rows = max(need_rows, self.num_rows_alloc)
            self.release()
            for headroom in (HEADROOM_TOKENS, block_size):  # less room if memory is tight
                capacity = -(-(span + headroom) // block_size) * block_size
                if rows * capacity <= cache_slots * MAX_FRACTION_OF_CACHE:
                    break
            else:
                return None
            self.num_rows_alloc, self.capacity = rows, capacity
        batch_index = {k: i for i, k in enumerate(keys)}
        keep = [r for r, (k, n) in enumerate(zip(self.keys, self.lens, strict=True))
                if k in batch_index and ctx[batch_index[k]] == n + 1]
        n_keep = len(keep)
        # Survivors end up in rows 0..n_keep-1: those already there stay, the rest fill the holes.
        keep_set = set(keep)
        holes = [r for r in range(n_keep) if r not in keep_set]
        movers = [r for r in keep if r >= n_keep]
        old_row = {r: r for r in keep if r < n_keep} | dict(zip(holes, movers, strict=True))
        new_keys = [self.keys[old_row[r]] for r in range(n_keep)]
        kept = set(new_keys)
        joiners = [k for k in keys if k not in kept]
        new_keys += joiners
        self.keys = new_keys
        self.lens = [ctx[batch_index[k]] for k in new_keys]
        row_of_batch = [0] * len(keys)
        for r, k in enumerate(new_keys):
            row_of_batch[batch_index[k]] = r
        appenders = list(range(n_keep))
        join_span = 0
        join_blocks = None
        if joiners:
            join_blocks_n = -(-max(self.lens[n_keep:]) // block_size)
            join_span = join_blocks_n * block_size
            rows_idx = torch.tensor([batch_index[k] for k in joiners], device=device)
            join_blocks = block_tables.index_select(0, rows_idx)[:, :join_blocks_n].reshape(-1)
        append_batch = torch.tensor([batch_index[new_keys[r]] for r in appenders], device=device,
                                    dtype=torch.int64)
        append_pos = torch.tensor([r * self.capacity + self.lens[r] - 1 for r in appenders],
                                  device=device, dtype=torch.int64)
        lens = torch.tensor(self.lens, device=device)
        rob = torch.tensor(row_of_batch, device=device, dtype=torch.int64)
        return MirrorStep(
            num_rows=len(new_keys), span=span,
            move_src=torch.tensor(movers, device=device) if movers else None,
            move_dst=torch.tensor(holes, device=device) if movers else None,
            append_index=append_pos if appenders else None,
            append_slots=slots.index_select(0, append_batch) if appenders else None,
            join_start=n_keep, join_blocks=join_blocks, join_span=join_span,
            row_of_batch=rob, batch_of_row=torch.argsort(rob),
            mask=decode_mask(lens, span, None, dtype), lens=lens,
        )

    def update(self, step: MirrorStep, kv_cache: torch.Tensor) -> torch.Tensor:
        """Apply the step to this layer's buffer; returns the K/V rows to attend to."""
        _, num_kv_heads, num_blocks, block_size, head_dim = kv_cache.shape
        buf = self._buffer(kv_cache)
        if step.move_src is not None:
            buf.index_copy_(2, step.move_dst, buf.index_select(2, step.move_src))
        if step.append_index is not None:
            pages = kv_cache.view(2, num_kv_heads, num_blocks * block_size, head_dim)
            flat = buf.view(2, num_kv_heads, -1, head_dim)
            flat.index_copy_(2, step.append_index, pages.index_select(2, step.append_slots))
        if step.join_blocks is not None:
            gathered = kv_cache.index_select(2, step.join_blocks).view(
                2, num_kv_heads, step.num_rows - step.join_start, step.join_span, head_dim)
            buf[:, :, step.join_start : step.num_rows, : step.join_span].copy_(gathered)
        return buf[:, :, : step.num_rows, : step.span]

    def _buffer(self, kv_cache: torch.Tensor) -> torch.Tensor:
        _, num_kv_heads, _, _, head_dim = kv_cache.shape
        shape = (2, num_kv_heads, self.num_rows_alloc, self.capacity, head_dim)
        key = kv_cache.data_ptr()
        buf = self.buffers.get(key)
        if buf is None or buf.shape != shape:
            # Zeroed: columns past a row's length are masked, but a masked NaN poisons SDPA.
            buf = self.buffers[key] = kv_cache.new_zeros(shape)
        return buf
