"""The MTP proposer: Qwen3.5's multi-token-prediction head (``qwen3_5_mtp``) proposes one draft
token per step from the target's own forward.

The head at position ``p`` takes the target's final hidden state ``h_p`` and the embedding of the
token after it, ``x_{p+1}``, and its attention layer keeps K/V of every earlier position in a
paged cache of its own (its own ``BlockManager``, keyed by the request's number). So after every
forward, the runner hands the head each row's *valid* positions: all of a prefill chunk or a
decode, and of a row that verified drafts only its input and the accepted drafts (the hidden
states after a rejected draft saw a wrong token). The next token of each position is the row's
next input, or the token sampled there for the last one (a chunk that samples nothing: the
request's next prompt token). The head's output at the last valid position, through the target's
``lm_head``, is the request's draft for the step after. Rolling back needs nothing: a rejected
draft's position is written again by the next step, and the head never read it.

Limits: one draft per step; no prefix caching (Qwen3.5 is hybrid, which turns it off anyway); no
tensor parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.engine.attention import choose_attention_backend, get_backend
from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.kv.kv_cache import block_bytes, memory_budget, num_blocks_for
from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.scheduler_output import SchedulerOutput
from mstar.engine.speculative.paged_span import Span, last_rows, span_inputs
from mstar.engine.speculative.verify import accept
from mstar.models.families.qwen3_5_mtp import load_mtp_head
from mstar.settings import WorkerSettings


@dataclass(frozen=True)
class _Empty:
    """A request with no tokens yet, for ``BlockManager.allocate_prompt`` (an empty table)."""

    seq_no: int

    def __len__(self) -> int:
        return 0


@dataclass
class _Row:
    seq_no: int
    start: int  # position of its first valid token
    hidden: list[int]  # the step's hidden-state rows of its valid positions
    next_ids: list[int]  # the token after each
    samples: bool  # it sampled: its last output proposes


class MtpProposer:
    def __init__(self, model, model_dir, settings: WorkerSettings, device: torch.device,
                 dtype: torch.dtype, max_model_len: int) -> None:
        self.model, self.device = model, device
        self.head = load_mtp_head(model, model_dir)
        self.block_size = bs = settings.kv_block_size
        layers = [layer.self_attn for layer in self.head.layers]
        attn = layers[0]
        per_block = block_bytes(len(layers), bs, attn.num_kv_heads, attn.head_dim, dtype)
        num_blocks = num_blocks_for(settings, per_block, max_model_len,
                                    memory_budget(settings, device))
        self.backend = get_backend(choose_attention_backend(settings, device))
        shape = self.backend.kv_cache_shape(num_blocks, bs, attn.num_kv_heads, attn.head_dim)
        self.kv_cache = torch.zeros(len(layers), *shape, device=device, dtype=dtype)
        for i, layer in enumerate(layers):
            layer.kv_cache = self.kv_cache[i]
        self.blocks = BlockManager(num_blocks, bs, enable_prefix_caching=False)
        self.off: set[int] = set()  # requests whose head cache did not fit: no drafts
        self.drafts: dict[int, tuple[int, int]] = {}  # request number -> (its length then, draft)

    def propose(self, seq: Sequence) -> tuple[int, ...]:
        """The head's draft for ``seq``'s next token, if it was made for its current length."""
        length, token = self.drafts.get(seq.seq_no, (-1, 0))
        return (token,) if length == len(seq) else ()

    @torch.inference_mode()
    def after_step(self, out: SchedulerOutput, input_ids: torch.Tensor, hidden: torch.Tensor,
                   sampled: list[int], prompt_token) -> None:
        """Run the head over the step's valid positions (``prompt_token(seq_no, position)``: a
        request's token, for a chunk that samples nothing)."""
        rows = [row for row in self._rows(out, input_ids.tolist(), sampled, prompt_token)
                if self._fits(row)]
        if not rows:
            return
        rows.sort(key=lambda r: len(r.hidden) != 1)  # one-token rows first
        for row, token in zip(rows, self._forward(rows, hidden), strict=True):
            if row.samples:  # the request then has start + valid + 1 tokens
                self.drafts[row.seq_no] = (row.start + len(row.hidden) + 1, token)

    def _rows(self, out: SchedulerOutput, ids: list[int], sampled: list[int],
              prompt_token) -> list[_Row]:
        rows, first, k = [], 0, 0
        for row in out.rows:
            q, drafts = row.num_tokens, row.draft_token_ids
            if row.samples:
                mine = sampled[k:k + row.num_samples]
                accepted = accept(drafts, mine) if drafts else 0
                valid = q - len(drafts) + accepted
                after = mine[accepted]
                k += row.num_samples
            else:
                valid, after = q, prompt_token(row.seq_no, row.end)
            rows.append(_Row(row.seq_no, row.start, list(range(first, first + valid)),
                             ids[first + 1:first + valid] + [after], row.samples))
            first += q
        return rows

    def _fits(self, row: _Row) -> bool:
        """Grow the request's head blocks to cover the row; a request that does not fit stops
        proposing (its head cache would have a hole)."""
        seq_no, total = row.seq_no, row.start + len(row.hidden)
        if seq_no in self.off:
            return False
        if seq_no not in self.blocks.tables and self.blocks.allocate_prompt(_Empty(seq_no), 0) is None:
            self.off.add(seq_no)
            return False
        if not self.blocks.can_grow_to(seq_no, total):
            self.off.add(seq_no)
            self.blocks.free_request(seq_no)
            return False
        self.blocks.grow_to(seq_no, total)
        return True

    def _forward(self, rows: list[_Row], hidden: torch.Tensor) -> list[int]:
        """The head's argmax after each row's last valid position."""
        spans = [Span(row.seq_no, row.start, len(row.hidden), self.blocks.block_ids(row.seq_no))
                 for row in rows]
        inputs, positions = span_inputs(spans, self.block_size, hidden.dtype, self.device)
        metadata = self.backend.build(inputs)
        metadata.begin_forward()
        cos, sin = self.model.model.rotary_emb(positions)
        picks = torch.tensor([i for row in rows for i in row.hidden]).to(self.device)
        next_ids = torch.tensor([t for row in rows for t in row.next_ids]).to(self.device)
        u = self.head(self.model.model.embed_tokens(next_ids), hidden[picks], cos, sin, metadata)
        return self.model.compute_logits(u[last_rows(spans, self.device)]).argmax(-1).tolist()

    def release(self, seq_no: int) -> None:
        """Free a request's head blocks (finished, aborted or preempted)."""
        self.drafts.pop(seq_no, None)
        self.off.discard(seq_no)
        self.blocks.free_request(seq_no)

    @property
    def num_free_blocks(self) -> int:
        return self.blocks.num_free_blocks
