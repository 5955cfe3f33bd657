"""Priority classes in the scheduler: the waiting queue's order, and whom a higher class preempts.

A request's class comes with it (``AddRequest.priority``: 0 low, 1 normal, 2 high; its API key's
``priority``). The waiting queue holds the classes highest first, each in arrival order (FCFS), so
the scheduler's FCFS admission takes the highest class first; a preempted request goes back to the
front of its own class. When the batch is full (``max_num_seqs``), a waiting request may preempt a
running request of a lower class (``MSTAR_PRIORITY_PREEMPTION``): the newest running request of
the lowest class below it, but never the oldest running request of a class, so every class that
runs keeps making progress. Preemption by KV-cache pressure is the scheduler's own rule (the
newest running request, whatever its class).

With every request in one class (no keys file) each placement is O(1) and nothing is preempted.
"""

from __future__ import annotations

from collections import deque

from mstar.engine.request.sequence import Sequence

LOW, NORMAL, HIGH = 0, 1, 2


class Priorities:
    """Each live request's class (by ``seq_no``), and the rules that use it."""

    def __init__(self, preempt: bool = True) -> None:
        self.preempt = preempt
        self.rank: dict[int, int] = {}
        self.mixed = False  # a request of a class other than NORMAL was ever added

    def of(self, seq: Sequence) -> int:
        return self.rank.get(seq.seq_no, NORMAL)

    def add(self, waiting: deque[Sequence], seq: Sequence, rank: int) -> None:
        """A new request: at the back of its class."""
        if rank != NORMAL:
            self.rank[seq.seq_no] = rank
            self.mixed = True
        if not waiting or self.of(waiting[-1]) >= rank:
            waiting.append(seq)
            return
        waiting.insert(next(i for i, s in enumerate(waiting) if self.of(s) < rank), seq)

    def requeue(self, waiting: deque[Sequence], seq: Sequence) -> None:
        """A preempted request: at the front of its class."""
        rank = self.of(seq)
        if not waiting or self.of(waiting[0]) <= rank:
            waiting.appendleft(seq)
            return
        at = next((i for i, s in enumerate(waiting) if self.of(s) <= rank), len(waiting))
        waiting.insert(at, seq)

    def forget(self, seq: Sequence) -> None:
        self.rank.pop(seq.seq_no, None)

    def victim(self, running: list[Sequence], incoming: Sequence) -> Sequence | None:
        """The running request ``incoming`` may preempt for a batch slot, or None. ``running`` is
        in admission order (oldest first)."""
        if not (self.preempt and self.mixed):
            return None
        rank = self.of(incoming)
        oldest: set[int] = set()  # each class's oldest running request: never a victim
        chosen: Sequence | None = None
        for seq in running:
            cls = self.of(seq)
            if cls not in oldest:
                oldest.add(cls)
                continue
            if cls < rank and (chosen is None or cls <= self.of(chosen)):
                chosen = seq  # the lowest class, and within it the newest
        return chosen
