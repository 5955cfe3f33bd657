"""The LoRA-capable linear: the base projection plus, for each adapter in the step, its delta on
that adapter's tokens.

Every wrapped linear holds ``max_loras`` device slots of (A, B), zero-width until an adapter is
written there. The step's token groups (``LoraStep.groups``: slot -> the flattened tokens of its
rows) are shared by every wrapped linear of the model and set by the runner around the forward;
base-model tokens are in no group and cost nothing.

The delta is computed per adapter segment: one gather, two small matmuls and one scatter-add per
distinct adapter in the step (a contiguous group is a slice, no gather). A gathered batched
matmul (each token's own A and B, ``torch.bmm``) measured slower on CPU at every batch tried
(docs/lora.rst), since it copies an A and a B per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mstar.models.layers.cpu_linear import replace_linears

# The projections that take adapters (the model's fused names): attention and MLP.
LORA_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
# Most PEFT modules fused into one of them (q, k, v): the width of a slot is this x the rank.
MOST_SHARDS = 3

Rows = slice | torch.Tensor


@dataclass
class LoraStep:
    """The current forward's token groups: (slot, rows) per adapter; empty = the base alone."""

    groups: list[tuple[int, Rows]] = field(default_factory=list)


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, step: LoraStep, max_loras: int, max_rank: int) -> None:
        super().__init__()
        self.base = base  # swapped for a packed / bf16 / quantized form like any linear
        self.in_features, self.out_features = base.in_features, base.out_features
        self.step = step
        w = base.weight
        width = MOST_SHARDS * max_rank
        self.register_buffer("lora_a", torch.zeros(max_loras, width, self.in_features,
                                                   dtype=w.dtype, device=w.device), persistent=False)
        self.register_buffer("lora_b", torch.zeros(max_loras, self.out_features, width,
                                                   dtype=w.dtype, device=w.device), persistent=False)
        self.widths = [0] * max_loras  # a slot's used width (0: this adapter skips the linear)

    def set_slot(self, slot: int, a: torch.Tensor | None, b: torch.Tensor | None) -> None:
        """Write an adapter's pair into ``slot`` (None: the adapter does not touch this linear)."""
        width = 0 if a is None else a.shape[0]
        if width:
            self.lora_a[slot, :width].copy_(a)
            self.lora_b[slot, :, :width].copy_(b)
        self.widths[slot] = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base(x)
        for slot, rows in self.step.groups:
            width = self.widths[slot]
            if not width:
                continue
            delta = (x[rows] @ self.lora_a[slot, :width].T) @ self.lora_b[slot, :, :width].T
            if isinstance(rows, slice):
                out[rows] += delta
            else:
                out.index_add_(0, rows, delta)
        return out


def wrap_lora_linears(model: nn.Module, max_loras: int, max_rank: int) -> LoraStep:
    """Wrap every attention and MLP projection of ``model`` (before packing or quantizing);
    returns the step groups they share."""
    step = LoraStep()
    targets = {id(m) for name, m in model.named_modules()
               if name.rsplit(".", 1)[-1] in LORA_LINEARS and isinstance(m, nn.Linear)}
    replace_linears(model, lambda linear: LoraLinear(linear, step, max_loras, max_rank),
                    keep=lambda linear: id(linear) not in targets)
    return step
