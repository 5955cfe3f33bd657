"""The model runner's persistent batch: one row slot per live request, kept across steps.

Token ids and block tables live in preallocated CPU tensors, a row per slot. Each step's
``SchedulerOutput`` changes them by its diffs (drop removed requests, add new ones, append new
block ids), and the runner writes every sampled token into its row; nothing is rebuilt from
Python lists. Only the thread running the runner's steps (one at a time, in order) touches it.

A slot is a stable integer below ``max_num_seqs`` for as long as its request is live: the sampler
keys its per-row state by it (``StepTensors.sample_slots``: the slots of the sampled rows, in the
order of the logits rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mstar.engine.schedule.scheduler_output import NewRequest, SchedulerOutput


@dataclass(frozen=True)
class StepTensors:
    """One step's flattened inputs (CPU), in row order."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor  # KV cache slot of every token
    block_tables: torch.Tensor  # [rows, most blocks of a row]
    context_lens: list[int]
    query_lens: list[int]
    num_decodes: int  # leading single-token rows
    sample_indices: torch.Tensor  # rows of the flattened tokens whose logits are sampled
    sample_slots: tuple[int, ...]  # their persistent-batch slots (repeated: a row's positions)
    sample_positions: tuple[int, ...]  # where each sampled token goes in its row


class InputBatch:
    def __init__(self, max_num_seqs: int, max_model_len: int, block_size: int) -> None:
        self.block_size = block_size
        # +1: a wasted row (its request finished meanwhile) may sample one past the last token.
        self.token_ids = torch.zeros(max_num_seqs, max_model_len + 1, dtype=torch.int64)
        self.block_table = torch.zeros(max_num_seqs, -(-(max_model_len + 1) // block_size),
                                       dtype=torch.int64)
        self._token_ids_np, self._block_table_np = self.token_ids.numpy(), self.block_table.numpy()
        self.num_blocks = [0] * max_num_seqs
        self.requests: list[NewRequest | None] = [None] * max_num_seqs  # sampler inputs
        self.slot_of: dict[int, int] = {}
        self.free_slots = list(range(max_num_seqs - 1, -1, -1))

    def apply(self, out: SchedulerOutput) -> None:
        """The step's diffs: removed requests first, then new ones, then new block ids."""
        for seq_no in out.removed:
            slot = self.slot_of.pop(seq_no, None)
            if slot is not None:
                self.requests[slot] = None
                self.free_slots.append(slot)
        for req in out.new:
            slot = self.free_slots.pop()
            self.slot_of[req.seq_no] = slot
            self.requests[slot] = req
            self.num_blocks[slot] = 0
            self.token_ids[slot, : len(req.token_ids)] = torch.tensor(req.token_ids)
        for row in out.rows:
            if row.draft_token_ids:  # speculative decoding: the proposed tokens follow the input
                slot = self.slot_of[row.seq_no]
                self.token_ids[slot, row.end - len(row.draft_token_ids) : row.end] = torch.tensor(
                    row.draft_token_ids)
            if row.new_block_ids:
                slot = self.slot_of[row.seq_no]
                n = self.num_blocks[slot]
                ids = torch.tensor(row.new_block_ids, dtype=torch.int64)
                self.block_table[slot, n : n + len(ids)] = ids
                self.num_blocks[slot] = n + len(ids)

    def slots(self, out: SchedulerOutput) -> list[int]:
        return [self.slot_of[row.seq_no] for row in out.rows]

    def tensors(self, out: SchedulerOutput) -> StepTensors:
        """Gather the step's inputs from the persistent rows."""
        slots = self.slots(out)
        if all(row.num_tokens == 1 and row.num_samples == 1 for row in out.rows):
            return self.decode_tensors(out, slots)
        return self.gathered_tensors(out, slots)

    def decode_tensors(self, out: SchedulerOutput, slots: list[int]) -> StepTensors:
        """A decode-only step (one token per row, sampled): ``gathered_tensors``' values from the
        rows' positions, gathered through numpy views of the persistent rows (a numpy index costs
        about a microsecond, a torch op several)."""
        bs = self.block_size
        positions = np.array([row.start for row in out.rows], dtype=np.int64)
        table = self._block_table_np
        max_blocks = max(self.num_blocks[s] for s in slots)
        ends = positions + 1
        return StepTensors(
            input_ids=torch.from_numpy(self._token_ids_np[slots, positions]),
            positions=torch.from_numpy(positions),
            slot_mapping=torch.from_numpy(table[slots, positions // bs] * bs + positions % bs),
            block_tables=torch.from_numpy(table[slots, :max_blocks]),
            context_lens=ends.tolist(),
            query_lens=[1] * len(slots),
            num_decodes=len(slots),
            sample_indices=torch.arange(len(slots)),
            sample_slots=tuple(slots),
            sample_positions=tuple(ends.tolist()),
        )

    def gathered_tensors(self, out: SchedulerOutput, slots: list[int]) -> StepTensors:
        """Any step: every token's position, slot and sampled row computed from the rows'
        lengths with tensor ops."""
        bs = self.block_size
        query_lens = [row.num_tokens for row in out.rows]
        n = torch.tensor(query_lens)
        row_of_token = torch.repeat_interleave(torch.arange(len(slots)), n)
        first = torch.cumsum(n, 0) - n
        offsets = torch.arange(int(n.sum())) - first[row_of_token]
        starts = torch.tensor([row.start for row in out.rows])
        positions = starts[row_of_token] + offsets
        slot_of_token = torch.tensor(slots)[row_of_token]
        blocks = self.block_table[slot_of_token, positions // bs]
        max_blocks = max(self.num_blocks[s] for s in slots)
        # every sampled position: a row's last one, or its last 1 + drafts when it verifies drafts
        samples = torch.tensor([row.num_samples for row in out.rows])
        row_of_sample = torch.repeat_interleave(torch.arange(len(slots)), samples)
        back = (torch.cumsum(samples, 0) - 1)[row_of_sample] - torch.arange(len(row_of_sample))
        ends = torch.tensor([row.end for row in out.rows])
        num_decodes = 0
        while num_decodes < len(query_lens) and query_lens[num_decodes] == 1:
            num_decodes += 1
        return StepTensors(
            input_ids=self.token_ids[slot_of_token, positions],
            positions=positions,
            slot_mapping=blocks * bs + positions % bs,
            block_tables=self.block_table[slots, :max_blocks],
            context_lens=[row.end for row in out.rows],
            query_lens=query_lens,
            num_decodes=num_decodes,
            sample_indices=(first + n - 1)[row_of_sample] - back,
            sample_slots=tuple(torch.tensor(slots, dtype=torch.int64)[row_of_sample].tolist()),
            sample_positions=tuple((ends[row_of_sample] - back).tolist()),
        )

    def record(self, step: StepTensors, tokens: list[int]) -> None:
        """The step's sampled tokens, each into its row (a continuation's input comes from
        here)."""
        if tokens:
            self._token_ids_np[list(step.sample_slots), list(step.sample_positions)] = tokens
