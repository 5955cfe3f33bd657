"""Recurrent-state cache for linear-attention layers (Gated DeltaNet), beside the paged KV cache.

Every running sequence owns one fixed-size slot: per linear-attention layer, its conv state and
its recurrent state. The block manager takes a slot when it admits a sequence and frees it with
the sequence's blocks (finish, abort, preemption; a preempted sequence recomputes from zero).
There is one slot per schedulable sequence (``max_num_seqs``) unless that would take more than
half the cache budget; then admission also waits for a free slot.
"""

from __future__ import annotations

import structlog
import torch

from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

# The recurrent state accumulates over the whole sequence: kept in float32 whatever the model dtype.
RECURRENT_DTYPE = torch.float32
# The state slots may take at most this share of the cache budget; the KV cache gets the rest.
MAX_BUDGET_FRACTION = 0.5


def state_layers(model) -> list:
    return [layer.linear_attn for layer in model.model.layers if hasattr(layer, "linear_attn")]


def _bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    n = torch.empty(0, dtype=dtype).element_size()
    for d in shape:
        n *= d
    return n


def slot_bytes(model, dtype: torch.dtype) -> int:
    """Bytes of one sequence's slot across all linear-attention layers (0: no such layers)."""
    total = 0
    for layer in state_layers(model):
        conv, recurrent = layer.state_shapes()
        total += _bytes(conv, dtype) + _bytes(recurrent, RECURRENT_DTYPE)
    return total


def num_slots_for(settings: WorkerSettings, per_slot: int, budget: float) -> int:
    """One slot per schedulable sequence, but at most ``MAX_BUDGET_FRACTION`` of the budget
    (then fewer sequences run at once: admission waits for a free slot)."""
    if not per_slot:
        return 0
    fit = int(budget * MAX_BUDGET_FRACTION // per_slot)
    if fit < 1:
        raise ValueError(
            f"cache budget too small: one sequence's recurrent state needs {per_slot} bytes, "
            f"the budget is {int(budget)} bytes (raise cpu_kv_cache_gb / kv_cache_memory_fraction)")
    if fit < settings.max_num_seqs:
        log.info("state_slots_capped", slots=fit, max_num_seqs=settings.max_num_seqs,
                 mib_per_slot=round(per_slot / (1 << 20), 2))
    return min(settings.max_num_seqs, fit)


def allocate_state_cache(model, num_slots: int, device: torch.device,
                         dtype: torch.dtype) -> list[torch.Tensor]:
    """Zeroed per-layer conv and recurrent state tensors [num_slots, ...], handed to the layers."""
    tensors = []
    for layer in state_layers(model):
        conv, recurrent = layer.state_shapes()
        layer.conv_state = torch.zeros(num_slots, *conv, device=device, dtype=dtype)
        layer.recurrent_state = torch.zeros(num_slots, *recurrent, device=device,
                                            dtype=RECURRENT_DTYPE)
        tensors += [layer.conv_state, layer.recurrent_state]
    log.info("state_cache_allocated", slots=num_slots, layers=len(tensors) // 2,
             mib=round(num_slots * slot_bytes(model, dtype) / (1 << 20), 3))
    return tensors


class StateSlots:
    """Free list of state slots (owned by the block manager)."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self.free = list(range(num_slots - 1, -1, -1))

    def take(self) -> int | None:
        return self.free.pop() if self.free else None

    def release(self, slot: int) -> None:
        self.free.append(slot)
