"""The draft proposer: a small model of the target's tokenizer, run by the same engine process on
its own paged KV cache, proposing its greedy continuation of each request.

The draft keeps its own ``BlockManager`` (the scheduler's ownership rules: ref-counted blocks,
prefix caching of full blocks when it is on), keyed by the request's number. Per request it
remembers how many of the request's tokens its cache holds (``base``) and the draft tokens it
wrote after them (``fed``). A proposal first rolls back: the cache stays valid up to the longest
run of ``fed`` the target accepted, and the positions past it are simply written again (the
paged cache needs no erasing). Then one forward runs every proposing request's catch-up run (the
accepted drafts' successor tokens it has not seen, at least the last token) and yields each one's
first draft; each further draft is one batched decode step of the requests that want more.

Drafts are the draft model's argmax: a point-mass proposal, so the target's verification
(``verify``) keeps the output distribution exact for sampled requests too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import AutoConfig

from mstar.engine.attention import choose_attention_backend, get_backend, model_attention_features
from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.kv.kv_cache import (
    allocate_kv_cache,
    attention_layers,
    block_bytes,
    memory_budget,
    num_blocks_for,
)
from mstar.engine.request.sequence import Sequence
from mstar.engine.speculative.paged_span import Span, last_rows, span_inputs
from mstar.models.loading.loader import load_model
from mstar.models.loading.shipped import weights_quantization
from mstar.settings import WorkerSettings


@dataclass
class _Cached:
    """What the draft's cache holds for one request: K/V of ``base`` of its tokens, then of the
    draft tokens ``fed`` (not yet known to be the request's)."""

    base: int
    fed: list[int] = field(default_factory=list)

    def valid(self, seq: Sequence) -> int:
        """Leading tokens of ``seq`` whose K/V are right: ``base`` plus the accepted ``fed``,
        short of the last token (the next forward's input)."""
        n = self.base
        tokens = seq.token_ids
        for token in self.fed:
            if n >= len(tokens) or tokens[n] != token:
                break
            n += 1
        return min(n, len(tokens) - 1)


@dataclass
class _Row:
    seq_no: int
    tokens: list[int]  # this forward's input
    start: int  # position of its first token
    room: int  # drafts still wanted after this forward's


class DraftModel:
    def __init__(self, settings: WorkerSettings, model_dir, device: torch.device,
                 dtype: torch.dtype, max_model_len: int) -> None:
        self.device, self.dtype = device, dtype
        self.block_size = bs = settings.kv_block_size
        config = AutoConfig.from_pretrained(model_dir)
        self.model = load_model(model_dir, config, device, dtype,
                                quantization=weights_quantization(settings, model_dir, device),
                                cache_dir=settings.cache_dir)
        layers = attention_layers(self.model)
        if len(layers) != len(self.model.model.layers):
            raise ValueError("the draft model has recurrent-state (linear-attention) layers")
        per_block = block_bytes(len(layers), bs, layers[0].num_kv_heads, layers[0].head_dim,
                                dtype)
        num_blocks = num_blocks_for(settings, per_block, max_model_len,
                                    memory_budget(settings, device))
        self.backend = get_backend(choose_attention_backend(
            settings, device, model_attention_features(self.model)))
        self.kv_cache = allocate_kv_cache(self.model, self.backend, num_blocks, bs, device, dtype)
        self.blocks = BlockManager(num_blocks, bs, settings.enable_prefix_caching)
        self.cached: dict[int, _Cached] = {}

    @torch.inference_mode()
    def propose(self, wants: list[tuple[Sequence, int]]) -> dict[int, tuple[int, ...]]:
        """Up to ``room`` drafts for each (request, room); a request whose draft blocks do not
        fit gets none."""
        rows = [row for seq, room in wants if (row := self._start(seq, room)) is not None]
        drafts: dict[int, list[int]] = {row.seq_no: [] for row in rows}
        while rows:
            for row, token in zip(rows, self._forward(rows), strict=True):
                drafts[row.seq_no].append(token)
                cached = self.cached[row.seq_no]
                if row.start >= cached.base:  # a draft was this forward's input
                    cached.fed += row.tokens
                row.start += len(row.tokens)
                row.tokens = [token]
                row.room -= 1
            rows = [row for row in rows if row.room > 0]
        return {seq_no: tuple(d) for seq_no, d in drafts.items()}

    def _start(self, seq: Sequence, room: int) -> _Row | None:
        """Roll the request's draft cache back to what the target accepted and grow its blocks
        for ``room`` drafts (the last one is never fed); None when they do not fit."""
        seq_no = seq.seq_no
        cached = self.cached.get(seq_no)
        if cached is None:
            num_cached = self.blocks.allocate_prompt(seq, 0)  # prefix-cache hits, no room yet
            if num_cached is None:
                return None
            cached = self.cached[seq_no] = _Cached(num_cached)
        valid = cached.valid(seq)
        cached.base, cached.fed = valid, []
        self.blocks.commit_full_blocks(seq, valid)
        total = len(seq) + room - 1
        if not self.blocks.can_grow_to(seq_no, total):
            return None
        self.blocks.grow_to(seq_no, total)
        cached.base = len(seq)  # the first forward writes the rest of its tokens
        return _Row(seq_no, list(seq.token_ids[valid:]), valid, room)

    def _forward(self, rows: list[_Row]) -> list[int]:
        """One forward of the rows (one-token rows first, as the backends batch them); the
        argmax after each row's last token, in ``rows``' order."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].tokens) != 1)
        spans = [Span(rows[i].seq_no, rows[i].start, len(rows[i].tokens),
                      self.blocks.block_ids(rows[i].seq_no)) for i in order]
        inputs, positions = span_inputs(spans, self.block_size, self.dtype, self.device)
        metadata = self.backend.build(inputs)
        metadata.begin_forward()
        ids = torch.tensor([t for i in order for t in rows[i].tokens]).to(self.device)
        hidden = self.model(ids, positions, metadata)
        tokens = self.model.compute_logits(hidden[last_rows(spans, self.device)]).argmax(-1)
        out = [0] * len(rows)
        for i, token in zip(order, tokens.tolist(), strict=True):
            out[i] = token
        return out

    def release(self, seq_no: int) -> None:
        """Free a request's draft blocks (finished, aborted or preempted)."""
        if self.cached.pop(seq_no, None) is not None:
            self.blocks.free_request(seq_no)

    @property
    def num_free_blocks(self) -> int:
        return self.blocks.num_free_blocks
