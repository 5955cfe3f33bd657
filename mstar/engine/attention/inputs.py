"""Backend-agnostic description of one step's attention layout."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mstar.models.layers.state_layout import StateLayout


@dataclass
class AttentionInputs:
    """Tokens are flattened: first one token per decoding sequence, then prefill chunks.

    ``query_lens[i]`` new tokens of sequence ``i`` attend to its first
    ``context_lens[i]`` cached tokens (earlier pages plus themselves, causally).
    """

    slot_mapping: torch.Tensor  # [num_tokens] flat cache slot of each new token
    block_tables: torch.Tensor  # [num_seqs, max_blocks] padded with 0
    context_lens: torch.Tensor  # [num_seqs]
    query_lens: list[int]
    context_lens_list: list[int]
    num_decodes: int  # leading sequences with exactly one new token
    block_size: int
    dtype: torch.dtype  # activation dtype (for float masks)
    seq_keys: list[int]  # unique per sequence, so a backend can reuse work across steps
    state_layout: StateLayout | None = None  # hybrid models: recurrent-state slots per sequence
    # Per sequence: position runs [start, end) whose tokens attend to each other both ways in
    # prefill (one image's tokens, Gemma 3); a chunk never ends inside one.
    bidirectional_spans: list[tuple[tuple[int, int], ...]] | None = None
