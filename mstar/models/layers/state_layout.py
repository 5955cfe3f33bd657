"""Where each sequence of a step keeps its recurrent state (for linear-attention layers).

Built by the engine (which owns the state slots), read by the layers: like the attention
metadata, one object per step shared by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StateLayout:
    """Tokens are flattened as for attention: one per decoding sequence first, then spans."""

    num_decodes: int
    decode_slots: torch.Tensor  # [num_decodes] state slot of each decoding sequence
    # [num_decodes, 1, 1]: 0 for a one-token row that starts its sequence (its slot's content is
    # stale), 1 otherwise; None when every decode row continues its sequence.
    decode_keep: torch.Tensor | None
    # Per prefill span: (first token row, tokens, state slot, starts the sequence).
    spans: list[tuple[int, int, int, bool]]
