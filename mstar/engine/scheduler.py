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
    """Sequences to run this step and how many new tokens each one computes.

    A sequence whose new tokens reach its end is sampled; a partially
    prefilled one (chunked prefill) is not.
    """

    seqs: list[Sequence] = field(default_factory=list)
    num_new_tokens: list[int] = field(default_factory=list)
    logprobs: list | None = None  # filled by the model runner when a request asked for them

    def __len__(self) -> int:
        return len(self.seqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.num_new_tokens)

    def samples(self, i: int) -> bool:
        seq = self.seqs[i]
        return seq.num_computed_tokens + self.num_new_tokens[i] == len(seq)


class Scheduler:
    """Decides every step which sequences run, within a token budget and a sequence cap.

    Running sequences go first (oldest first); when the KV cache is full the newest
    running sequence is preempted (its blocks freed, recomputed later), so the oldest
    request always makes progress. Waiting requests are admitted FCFS.
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
                batch.seqs.append(seq)
                batch.num_new_tokens.append(n)
                budget -= n
                i += 1
                continue
            break
        while not preempted and self.waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                break
            seq = self.waiting[0]
            if self.block_manager.allocate_prompt(seq, budget) is None:
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            n = min(len(seq) - seq.num_computed_tokens, budget)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
        # Single-token (decode) sequences first: the attention backend batches them together.
        order = sorted(range(len(batch)), key=lambda i: batch.num_new_tokens[i] != 1)
        batch.seqs = [batch.seqs[i] for i in order]
        batch.num_new_tokens = [batch.num_new_tokens[i] for i in order]
        return batch

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free_seq(seq)
        seq.status = SequenceStatus.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        log.debug("preempted", request_id=seq.request_id, num_tokens=len(seq))

    def finish(self, seq: Sequence, reason: str) -> None:
        """Mark finished and free its blocks at once (also used for abort)."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        self.block_manager.free_seq(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
