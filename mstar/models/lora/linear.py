"""The LoRA-capable linear: the base projection plus, for each adapter in the step, its delta on
that adapter's tokens.

Every wrapped linear holds ``max_loras`` device slots of (A, B), zero until an adapter is written
there (a slot's columns past its adapter's width stay zero, so a whole slot can be multiplied).
The step's rows (``step.LoraStep``: the padded batch of adapters with few tokens, and a segment
per adapter with many) are shared by every wrapped linear of the model and set by the runner
around the forward; base-model tokens are in neither and cost nothing.

Under tensor parallelism a slot holds the rank's part of each pair, cut like the base weight
(``adapter``): a column-parallel linear's delta is its own rows of the output; a row-parallel
one's (``RowParallelLinear``) is the rank's term of a sum, added to the base's term before the
all-reduce, so the one all-reduce sums both (sum over ranks of B A_r x_r = B A x).
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.families.parallel import RowParallelLinear
from mstar.models.lora.step import LoraStep

# The projections that take adapters (the model's fused names: attention and MLP), each with the
# number of PEFT modules fused into it (q, k, v; gate, up). A slot is that many ranks wide: every
# decode step multiplies whole slots, so a slot wider than its linear's adapters reads zeros (at
# three ranks for every linear, 16 rank-16 adapters read 778 MB a step instead of 466 MB).
LORA_LINEARS = {"qkv_proj": 3, "o_proj": 1, "gate_up_proj": 2, "down_proj": 1}


class LoraLinear(nn.Module):
    @property
    def native_ops(self) -> bool:
        """The native CPU op (``lora_delta``, one call for every adapter of the step) instead of
        the torch path: a switch of the step the wrapped linears share (``LoraStep.native``), so
        that a step builds only that path's rows; set by the loader with the other fused ops
        (``fused_ops.use_native_ops``)."""
        return self.step.native

    @native_ops.setter
    def native_ops(self, enabled: bool) -> None:
        self.step.native = enabled

    def __init__(self, base: nn.Linear | RowParallelLinear, step: LoraStep, max_loras: int,
                 max_rank: int, shards: int) -> None:
        super().__init__()
        self.base = base  # swapped for a packed / bf16 / quantized form like any linear
        # a row-parallel base: the delta joins the rank's term, before the base's all-reduce
        self.row_parallel = isinstance(base, RowParallelLinear)
        self.out_features, self.in_features = base.weight.shape  # the rank's shard under TP
        self.step = step
        w = base.weight
        width = shards * max_rank
        # Stored transposed (A^T: [in, width], B^T: [width, out] per slot), so every matmul of the
        # delta reads contiguous operands: a transposed view of [slots, out, width] made bmm
        # copy the slots' B on each call.
        self.register_buffer("lora_a", torch.zeros(max_loras, self.in_features, width,
                                                   dtype=w.dtype, device=w.device), persistent=False)
        self.register_buffer("lora_b", torch.zeros(max_loras, width, self.out_features,
                                                   dtype=w.dtype, device=w.device), persistent=False)
        self.widths = [0] * max_loras  # a slot's used width (0: this adapter skips the linear)
        # The native op's: the used widths, and the output columns each rank row of B writes (a
        # fused linear's B is block-diagonal: q's rank rows write q's columns), [lo, hi).
        self.register_buffer("lora_widths", torch.zeros(max_loras, dtype=torch.int32),
                             persistent=False)
        self.register_buffer("lora_spans", torch.zeros(max_loras, width, 2, dtype=torch.int32),
                             persistent=False)

    def set_slot(self, slot: int, a: torch.Tensor | None, b: torch.Tensor | None) -> None:
        """Write an adapter's pair into ``slot`` (None: the adapter does not touch this linear)."""
        width = 0 if a is None else a.shape[0]
        self.lora_a[slot].zero_()  # a narrower adapter leaves no columns of the last one
        self.lora_b[slot].zero_()
        self.lora_spans[slot].zero_()
        if width:
            self.lora_a[slot, :, :width].copy_(a.T)
            self.lora_b[slot, :width].copy_(b.T)
            self.lora_spans[slot, :width] = written_columns(b.T)
        self.widths[slot] = width
        self.lora_widths[slot] = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base.partial(x) if self.row_parallel else self.base(x)
        if self.native_ops:
            groups = self.step.groups
            if groups is not None:
                torch.ops.mstar_cpu.lora_delta(out, x, self.lora_a, self.lora_b, self.lora_spans,
                                               self.lora_widths, groups.order, groups.starts,
                                               groups.slots)
            return self.base.reduce(out) if self.row_parallel else out
        batch = self.step.batched
        if batch is not None:  # the adapters with few tokens: five ops for all of them
            xs = (x.index_select(0, batch.index) * batch.keep).view(batch.slots, batch.most, -1)
            delta = torch.bmm(torch.bmm(xs, self.lora_a[:batch.slots]), self.lora_b[:batch.slots])
            out.index_add_(0, batch.index, delta.view(-1, self.out_features))
        for slot, rows in self.step.segments:
            width = self.widths[slot]
            if not width:
                continue
            delta = (x[rows] @ self.lora_a[slot, :, :width]) @ self.lora_b[slot, :width]
            if isinstance(rows, slice):
                out[rows] += delta
            else:
                out.index_add_(0, rows, delta)
        return self.base.reduce(out) if self.row_parallel else out


def written_columns(b_t: torch.Tensor) -> torch.Tensor:
    """[width, 2] int32: the first and one past the last nonzero column of each row of B^T
    ([0, 0) for a zero row)."""
    nonzero = b_t != 0
    cols = torch.arange(b_t.shape[1])
    lo = torch.where(nonzero, cols, b_t.shape[1]).min(dim=1).values
    hi = torch.where(nonzero, cols + 1, 0).max(dim=1).values
    empty = hi == 0
    return torch.stack([lo.masked_fill(empty, 0), hi], dim=1).to(torch.int32)


def wrap_lora_linears(model: nn.Module, max_loras: int, max_rank: int) -> LoraStep:
    """Wrap every attention and MLP projection of ``model`` (before packing or quantizing; a
    tensor-parallel rank's row-parallel ones too); returns the step groups they share."""
    step = LoraStep()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if name in LORA_LINEARS and isinstance(child, nn.Linear | RowParallelLinear):
                setattr(parent, name,
                        LoraLinear(child, step, max_loras, max_rank, LORA_LINEARS[name]))
    return step
