"""The attention layout of a proposer's own forward: one span of positions per request over that
request's blocks in the proposer's paged cache (the draft model's, the MTP head's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mstar.engine.attention import AttentionInputs


@dataclass(frozen=True)
class Span:
    seq_no: int  # the request's number
    start: int  # position of the span's first token
    length: int
    blocks: Sequence[int]  # the request's block ids, in position order


def span_inputs(spans: list[Span], block_size: int, dtype: torch.dtype,
                device: torch.device) -> tuple[AttentionInputs, torch.Tensor]:
    """(attention inputs, positions) of the spans, flattened in their order; one-token spans
    must come first (the backends batch them as decodes)."""
    positions: list[int] = []
    slots: list[int] = []
    for span in spans:
        run = range(span.start, span.start + span.length)
        positions += run
        slots += [span.blocks[p // block_size] * block_size + p % block_size for p in run]
    width = max(len(span.blocks) for span in spans)
    query_lens = [span.length for span in spans]
    context = [span.start + span.length for span in spans]
    inputs = AttentionInputs(
        slot_mapping=_tensor(slots, device),
        block_tables=_tensor([[*s.blocks] + [0] * (width - len(s.blocks)) for s in spans], device),
        context_lens=_tensor(context, device),
        query_lens=query_lens,
        context_lens_list=context,
        num_decodes=sum(1 for q in query_lens if q == 1),
        block_size=block_size,
        dtype=dtype,
        seq_keys=[span.seq_no for span in spans],
    )
    return inputs, _tensor(positions, device)


def last_rows(spans: list[Span], device: torch.device) -> torch.Tensor:
    """The flat row of each span's last token."""
    return (torch.tensor([span.length for span in spans]).cumsum(0) - 1).to(device)


def _tensor(data, device: torch.device) -> torch.Tensor:
    return torch.tensor(data, dtype=torch.int64).to(device, non_blocking=True)
