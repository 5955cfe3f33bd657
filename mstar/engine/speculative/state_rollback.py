"""Rolling back the recurrent state (Qwen3.5's Gated DeltaNet layers) of rejected draft tokens.

A linear-attention layer folds every token of a row into its slot's conv and recurrent state, so
a verify forward leaves the state past the rejected drafts. We snapshot and recompute: before a
step that verifies drafts, the slots of its verifying rows are copied; after sampling, a row
with a rejected draft gets its slot back, and the scheduler counts none of that row's tokens as
computed, so the next step runs them again (its input token, the accepted drafts and the new
token) from the restored state, without drafts (so the state catches up before the next
verify). Why not keep a state per position instead: the chunked delta rule yields only the final
state of a span, per-position states would cost ``k`` slots per row, and a recomputed run of a
few tokens costs about what one decode does when the weights dominate.
A row whose drafts are all accepted keeps its state and recomputes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mstar.engine.speculative.verify import accept


class StateSnapshot:
    """The state of the verifying rows' slots, per layer: (conv, recurrent), copied."""

    def __init__(self, layers: list, rows: Sequence, slots: Sequence[int]) -> None:
        self.layers = layers
        self.rows = rows
        self.slots = slots  # each row's state slot (-1: a row without drafts)
        verifying = [s for r, s in zip(rows, slots, strict=True) if r.draft_token_ids]
        index = torch.tensor(verifying, dtype=torch.int64, device=layers[0].conv_state.device)
        self.saved = {slot: i for i, slot in enumerate(verifying)}
        self.copies = [(layer.conv_state.index_select(0, index),
                        layer.recurrent_state.index_select(0, index)) for layer in layers]

    def restore_rejected(self, token_ids: Sequence[int]) -> None:
        """Put back the slots of rows that rejected a draft (``token_ids``: the step's samples,
        ``num_samples`` per row in row order)."""
        k = 0
        back: list[int] = []
        for row, slot in zip(self.rows, self.slots, strict=True):
            drafts = row.draft_token_ids
            if drafts and accept(drafts, token_ids[k:k + row.num_samples]) < len(drafts):
                back.append(slot)
            k += row.num_samples
        if not back:
            return
        device = self.layers[0].conv_state.device
        dst = torch.tensor(back, dtype=torch.int64, device=device)
        src = torch.tensor([self.saved[s] for s in back], dtype=torch.int64, device=device)
        for layer, (conv, recurrent) in zip(self.layers, self.copies, strict=True):
            layer.conv_state.index_copy_(0, dst, conv.index_select(0, src))
            layer.recurrent_state.index_copy_(0, dst, recurrent.index_select(0, src))
