"""Continuous batching with chunked prefill and preemption by recompute."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import structlog

from mstar.engine.block_manager import BlockManager
from mstar.engine.sequence import Sequence, SequenceStatus

log = structlog.get_logger(__name__)


@dataclass
class ScheduledBatch:
    """Sequences to run this step, where each one starts and how many new tokens it computes.

    ``starts[i]`` is how many of sequence i's tokens are already in the KV cache when the step
    runs. A sequence whose new tokens reach its end is sampled; a partially prefilled one
    (chunked prefill) is not. A continuation (see ``Scheduler.schedule_continuation``) is planned
    before its input token exists, so its rows run one past the sequence's current end.
    """

    seqs: list[Sequence] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    # A continuation's input ids: row i takes the previous step's sampled token input_rows[i].
    input_rows: list[int] | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    def add(self, seq: Sequence, start: int, num_new_tokens: int) -> None:
        self.seqs.append(seq)
        self.starts.append(start)
        self.num_new_tokens.append(num_new_tokens)

    def samples(self, i: int) -> bool:
        return self.starts[i] + self.num_new_tokens[i] >= len(self.seqs[i])

    def decodes_first(self) -> ScheduledBatch:
        """Single-token (decode) rows first: the attention backend batches them together."""
        order = sorted(range(len(self)), key=lambda i: self.num_new_tokens[i] != 1)
        return ScheduledBatch([self.seqs[i] for i in order], [self.starts[i] for i in order],
                              [self.num_new_tokens[i] for i in order])


def ready_to_run(seq: Sequence) -> bool:
    """A request waits until its structured-output grammar has compiled (off the hot path)."""
    return seq.sampling_state is None or seq.sampling_state.grammar_ready


class Scheduler:
    """Decides every step which sequences run, within a token budget and a sequence cap.

    Running sequences go first (oldest first); when the KV cache is full the newest
    running sequence is preempted (its blocks freed, recomputed later), so the oldest
    request always makes progress. Waiting requests are admitted FCFS, skipping those whose
    grammar is still compiling.
    """

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int):
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def can_admit(self) -> bool:
        """Whether a fresh schedule() could start a waiting (or preempted) request now."""
        return len(self.running) < self.max_num_seqs and self._next_admissible() is not None

    def _next_admissible(self) -> Sequence | None:
        """The oldest waiting sequence that is ready to run (FCFS among the ready ones)."""
        return next((seq for seq in self.waiting if ready_to_run(seq)), None)

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(len(seq) - seq.num_computed_tokens, budget)
            total = seq.num_computed_tokens + n
            while not self.block_manager.can_grow_to(seq, total):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                self.block_manager.grow_to(seq, total)
                batch.add(seq, seq.num_computed_tokens, n)
                budget -= n
                i += 1
                continue
            break
        while not preempted and self.waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                break
            seq = self._next_admissible()
            if seq is None or self.block_manager.allocate_prompt(seq, budget) is None:
                break
            self.waiting.remove(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            n = min(len(seq) - seq.num_computed_tokens, budget)
            batch.add(seq, seq.num_computed_tokens, n)
            budget -= n
        return batch.decodes_first()

    def schedule_continuation(self, batch: ScheduledBatch) -> ScheduledBatch | None:
        """Plan the step after ``batch`` before ``batch`` has run: one more token for every
        sequence it samples, at the position right after its new tokens.

        Used by the overlapped loop. Grows block tables as needed; None when nothing is sampled or
        the KV cache cannot hold the extra tokens (the loop then takes a fresh ``schedule()``).
        """
        cont = ScheduledBatch(input_rows=[])
        sampled = 0
        for i, seq in enumerate(batch.seqs):
            if not batch.samples(i):
                continue
            if not seq.is_finished:
                cont.add(seq, batch.starts[i] + batch.num_new_tokens[i], 1)
                cont.input_rows.append(sampled)
            sampled += 1
        totals = [start + 1 for start in cont.starts]
        if not cont.seqs or not self.block_manager.can_grow_all(cont.seqs, totals):
            return None
        for seq, total in zip(cont.seqs, totals, strict=True):
            self.block_manager.grow_to(seq, total)
        return cont

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free_seq(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        log.debug("preempted", request_id=seq.request_id, num_tokens=len(seq))

    def finish(self, seq: Sequence) -> None:
        """Mark finished and free its blocks at once (also used for abort)."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free_seq(seq)
        seq.status = SequenceStatus.FINISHED
