"""Interim wiring: which ``SamplingBatch`` slot each running sequence holds.

To be replaced by the persistent input batch, which will own slot assignment. Until then the model
runner's ``prepare`` calls ``SlotTable.update`` for every fresh batch (from ``schedule()``, with
no step in flight, on the scheduling thread; a continuation adds no sequence): sequences that left
the running set since (finished, aborted or preempted) give their slot back, and each sequence new
to the running set takes one, with its outputs so far. The changes travel with the step
(``SamplingStep``) and the batch applies them in step order on the thread that samples.
"""

from __future__ import annotations

from mstar.engine.sampling.batch import RowAdd
from mstar.engine.sequence import Sequence, SequenceStatus


class SlotTable:
    def __init__(self, max_rows: int) -> None:
        self._free = list(range(max_rows - 1, -1, -1))  # pop() hands out the lowest first
        self._held: dict[int, tuple[Sequence, int]] = {}  # seq_no -> (sequence, slot)

    def slot(self, seq: Sequence) -> int:
        return self._held[seq.seq_no][1]

    def update(self, seqs: list[Sequence]) -> tuple[list[int], list[RowAdd]]:
        """A fresh batch of ``seqs``: (slots freed, rows added)."""
        removed = []
        for key, (seq, slot) in list(self._held.items()):
            if seq.status is not SequenceStatus.RUNNING:
                del self._held[key]
                self._free.append(slot)
                removed.append(slot)
        added = []
        for seq in seqs:
            if seq.seq_no not in self._held:
                slot = self._free.pop()
                self._held[seq.seq_no] = (seq, slot)
                n = seq.num_prompt_tokens
                added.append(RowAdd(slot, seq.params, seq.token_ids[:n], seq.token_ids[n:],
                                    seq.generator, seq.sampling_state))
        return removed, added
