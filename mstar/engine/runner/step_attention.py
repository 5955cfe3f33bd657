"""The attention backend's metadata for a step, built from the persistent batch: each row's KV
slots, block table and context, the recurrent-state slots of hybrid models, and the image spans
that attend both ways in prefill (Gemma 3). Built on the thread that runs the step."""

from __future__ import annotations

import torch

from mstar.engine.attention import AttentionInputs
from mstar.engine.runner.input_batch import InputBatch, StepTensors
from mstar.engine.schedule.scheduler_output import SchedulerOutput
from mstar.models.layers.state_layout import StateLayout


def on_device(data, device: torch.device, dtype=torch.int64) -> torch.Tensor:
    """A host list as a tensor on the step's device (copied without waiting)."""
    return torch.tensor(data, dtype=dtype).to(device, non_blocking=True)


class StepAttention:
    def __init__(self, backend, batch: InputBatch, block_size: int, device: torch.device,
                 dtype: torch.dtype, state_slots: bool, bidirectional_images: bool) -> None:
        """``state_slots``: the model keeps recurrent states (hybrid); ``bidirectional_images``:
        its image tokens attend to each other both ways in prefill."""
        self.backend, self.batch = backend, batch
        self.block_size, self.device, self.dtype = block_size, device, dtype
        self.state_slots, self.bidirectional_images = state_slots, bidirectional_images

    def build(self, out: SchedulerOutput, step: StepTensors):
        """The backend's metadata for the step's rows."""
        seq_nos = [row.seq_no for row in out.rows]
        return self.backend.build(AttentionInputs(
            slot_mapping=step.slot_mapping.to(self.device, non_blocking=True),
            block_tables=step.block_tables.to(self.device, non_blocking=True),
            context_lens=on_device(step.context_lens, self.device),
            query_lens=step.query_lens,
            context_lens_list=step.context_lens,
            num_decodes=step.num_decodes,
            block_size=self.block_size,
            dtype=self.dtype,
            seq_keys=seq_nos,
            state_layout=self._state_layout(step, seq_nos) if self.state_slots else None,
            bidirectional_spans=self._image_spans(out) if self.bidirectional_images else None,
        ))

    def warmup(self, q: int, ctx: int):
        """Metadata for ``q`` tokens ending at ``ctx`` in block 0 (still free at warm-up): a
        prefill from a zero state, or (``q == 1``) a decode that continues it."""
        decode = int(q == 1)
        return self.backend.build(AttentionInputs(
            slot_mapping=on_device(list(range(ctx - q, ctx)), self.device),
            block_tables=on_device([[0]], self.device),
            context_lens=on_device([ctx], self.device),
            query_lens=[q],
            context_lens_list=[ctx],
            num_decodes=decode,
            block_size=self.block_size,
            dtype=self.dtype,
            seq_keys=[-1],
            state_layout=StateLayout(decode, on_device([0] * decode, self.device), None,
                                     [] if decode else [(0, q, 0, True)]),
        ))

    def _image_spans(self, out: SchedulerOutput) -> list[tuple[tuple[int, int], ...]]:
        """Per row: the placeholder runs [start, end) of its images that the row touches."""
        spans = []
        for row in out.rows:
            req = self.batch.requests[self.batch.slot_of[row.seq_no]]
            spans.append(tuple((im.offset, im.end) for im in req.images
                               if im.offset < row.end and im.end > row.start))
        return spans

    def _state_layout(self, step: StepTensors, seq_nos: list[int]) -> StateLayout:
        """Each row's state slot; a span starting at token 0 starts from a zero state."""
        batch = self.batch
        slots = [batch.requests[batch.slot_of[k]].state_slot for k in seq_nos]
        nd = step.num_decodes
        starts = [c - q for c, q in zip(step.context_lens, step.query_lens, strict=True)]
        spans, row = [], nd
        for i in range(nd, len(seq_nos)):
            n = step.query_lens[i]
            spans.append((row, n, slots[i], starts[i] == 0))
            row += n
        starts_fresh = [start == 0 for start in starts[:nd]]
        keep = None
        if any(starts_fresh):  # one-token prompts: their slot still holds a previous owner's state
            keep = on_device([[[0.0 if f else 1.0]] for f in starts_fresh], self.device,
                             self.dtype)
        return StateLayout(nd, on_device(slots[:nd], self.device), keep, spans)
