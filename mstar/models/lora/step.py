"""A step's LoRA token rows: which tokens each adapter's delta applies to, shared by every wrapped
linear of the model (set by the runner around the forward, ``LoraSlots.begin``).

An adapter's tokens take one of two shapes, by how many the step has:

- **few** (decode rows; at most ``BATCHED_MAX_TOKENS``): every such adapter together, as one
  padded batch. The tokens are gathered into [slots, most, in] (padding rows zeroed by ``keep``),
  multiplied by the slots' A and B in two batched matmuls, and scatter-added back: five ops per
  linear however many adapters the step has. Per-adapter segments cost three or four ops per
  adapter per linear, which at 16 adapters and 32 decode rows was most of the step
  (``benchmark/lora.py``: 0.38x the base alone, docs/lora.rst).
- **many** (a prompt's chunk): a segment of its own, a slice when contiguous, so a long chunk
  is not padded to, nor pads others to, its length.

A batched matmul with each token's own A and B (gathered per token) copies an A and a B per
token; this one reads the slots' A and B in place (``[:slots]`` is a view: the slot allocator
hands out the lowest free slot, so a step's slots sit at the front).

Both shapes are the torch path. With the native CPU ops (``LoraStep.native``, switched through
every wrapped linear's ``native_ops``), every adapter's tokens go to one ``lora_delta`` call per
linear instead, as **groups**: the token rows of each slot in turn (``Groups``). A step builds
only the shape its path reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Tokens: an adapter with at most this many in a step joins the padded batch (a decode row is 1;
# a speculative row a few). Above it, its own segment: padding every slot to a chunk's length
# would cost more than the segment's own ops.
BATCHED_MAX_TOKENS = 8

Rows = slice | torch.Tensor
Spans = list[tuple[int, int]]  # [start, end) token ranges


@dataclass(frozen=True)
class Batched:
    """The padded batch: slots [0, ``slots``) with ``most`` rows each."""

    slots: int
    most: int
    index: torch.Tensor  # [slots * most] the token row of each batch row (padding: row 0)
    keep: torch.Tensor  # [slots * most, 1] 1 for a token's row, 0 for padding (model dtype)


@dataclass(frozen=True)
class Groups:
    """Every adapter's token rows, slot by slot: group g is ``order[starts[g]:starts[g + 1]]``,
    in slot ``slots[g]`` (the native op's operands, int64)."""

    order: torch.Tensor
    starts: torch.Tensor
    slots: torch.Tensor


@dataclass
class LoraStep:
    """The current forward's adapter rows; empty = the base model alone."""

    segments: list[tuple[int, Rows]] = field(default_factory=list)  # (slot, rows) each
    batched: Batched | None = None
    groups: Groups | None = None
    native: bool = False  # the native op runs the delta (set at load, with the other fused ops)

    def set(self, spans: dict[int, Spans], device: torch.device, dtype: torch.dtype) -> None:
        """The rows of each slot's adapter (``spans``: slot -> its token ranges)."""
        if self.native:
            self.groups = groups(spans, device) if spans else None
            return
        few = {slot: s for slot, s in spans.items() if count(s) <= BATCHED_MAX_TOKENS}
        self.segments = [(slot, rows(s, device)) for slot, s in spans.items() if slot not in few]
        self.batched = batched(few, device, dtype) if few else None

    def clear(self) -> None:
        self.segments, self.batched, self.groups = [], None, None


def count(spans: Spans) -> int:
    return sum(b - a for a, b in spans)


def rows(spans: Spans, device: torch.device) -> Rows:
    """A slice when the tokens are contiguous, else their indices."""
    if len(spans) == 1:
        return slice(*spans[0])
    return torch.cat([torch.arange(a, b) for a, b in spans]).to(device)


def batched(few: dict[int, Spans], device: torch.device, dtype: torch.dtype) -> Batched:
    """The padded batch of slots [0, max slot]: slot s's tokens in rows [s * most, ...)."""
    slots, most = max(few) + 1, max(count(s) for s in few.values())
    index = torch.zeros(slots * most, dtype=torch.long)
    keep = torch.zeros(slots * most, 1, dtype=dtype)
    for slot, spans in few.items():
        tokens = [t for a, b in spans for t in range(a, b)]
        start = slot * most
        index[start:start + len(tokens)] = torch.tensor(tokens)
        keep[start:start + len(tokens)] = 1
    return Batched(slots, most, index.to(device), keep.to(device))


def groups(spans: dict[int, Spans], device: torch.device) -> Groups:
    order = [t for s in spans.values() for a, b in s for t in range(a, b)]
    starts = [0]
    for s in spans.values():
        starts.append(starts[-1] + count(s))
    return Groups(torch.tensor(order, device=device), torch.tensor(starts, device=device),
                  torch.tensor(list(spans), device=device))
