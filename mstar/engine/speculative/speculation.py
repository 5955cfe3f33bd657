"""Who speculates, how many drafts, and the counts: the scheduler's side of speculative decoding.

Every decoding request may speculate: penalties and ``min_tokens`` count the drafts before each
verified position (``draft_rows``), a grammar checks the drafts and rolls back
(``mstar.engine.sampling.grammar``), a hybrid model's recurrent state is restored after a
rejection (``state_rollback``; ``recompute_rejected``).

What a miss costs is kept small, so open-ended text, where drafts rarely match, runs about as fast
as without speculation:

- a request's draft length follows its acceptance: one more than its last accepted run after a
  rejection, doubled after a fully accepted one (at most ``k``), so a request whose drafts keep
  failing verifies one draft a step, not ``k``;
- a verify that accepts nothing pauses the request's proposals for 1, 3, 7, ... steps (doubling
  with each consecutive miss, at most ``MAX_PAUSE``), reset by an accepted draft;
- a request stops speculating for good when its accepted share of its drafts falls below
  ``MSTAR_SPECULATIVE_MIN_ACCEPTANCE`` (after ``FLOOR_AFTER_ROUNDS * k`` proposed).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mstar.engine.request.sequence import Sequence
from mstar.engine.speculative.ngram import NgramIndex
from mstar.settings import WorkerSettings

if TYPE_CHECKING:
    from mstar.engine.speculative.draft_model import DraftModel
    from mstar.engine.speculative.mtp_proposer import MtpProposer

FLOOR_AFTER_ROUNDS = 4  # proposed >= this * k before the acceptance floor applies
MAX_PAUSE = 31  # the most steps a request skips proposing after consecutive misses


@dataclass
class SpeculationStats:
    """Totals since start, per method (only one runs at a time): what ``/metrics`` shows."""

    method: str
    proposed: int = 0
    accepted: int = 0
    steps: int = 0  # rows that verified drafts
    stopped: int = 0  # requests turned off by the acceptance floor
    propose_s: float = 0.0  # proposing drafts
    verify_s: float = 0.0  # the forwards (and sampling) of steps that verified drafts

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


@dataclass
class _Tally:
    """One request's proposer state and counts."""

    index: NgramIndex
    length: int  # drafts to propose next (at most k)
    proposed: int = 0
    accepted: int = 0
    misses: int = 0  # consecutive verifies that accepted nothing
    pause: int = 0  # steps left without proposals
    off: bool = False

    def verified(self, proposed: int, accepted: int, k: int) -> None:
        self.proposed += proposed
        self.accepted += accepted
        self.length = min(k, 2 * self.length if accepted == proposed else accepted + 1)
        self.misses = 0 if accepted else self.misses + 1
        self.pause = min(MAX_PAUSE, 2**self.misses - 1)


@dataclass
class Speculation:
    method: str
    num_tokens: int
    min_n: int
    max_n: int
    min_acceptance: float
    recompute_rejected: bool = False  # a hybrid model: a rejection recomputes the row
    draft: DraftModel | None = None  # the draft proposer's model
    mtp: MtpProposer | None = None  # the MTP proposer (neither: n-gram)
    stats: SpeculationStats = field(init=False)
    tallies: dict[int, _Tally] = field(default_factory=dict)
    pending: dict[int, tuple[int, ...]] = field(default_factory=dict)  # prepared drafts

    def __post_init__(self) -> None:
        self.stats = SpeculationStats(self.method)

    @classmethod
    def from_settings(cls, settings: WorkerSettings, hybrid: bool,
                      draft: DraftModel | None = None,
                      mtp: MtpProposer | None = None) -> Speculation:
        return cls(settings.speculative_method, settings.num_speculative_tokens,
                   min(settings.ngram_min_n, settings.ngram_max_n), settings.ngram_max_n,
                   settings.speculative_min_acceptance, recompute_rejected=hybrid, draft=draft,
                   mtp=mtp)

    def _room(self, seq: Sequence, tally: _Tally) -> int:
        """Drafts ``seq`` may get: its draft length, at most one token fewer than its remaining
        output (so a row never runs past max_tokens); 0 once the floor turned it off."""
        return 0 if tally.off else min(tally.length,
                                       seq.params.max_tokens - seq.num_output_tokens - 1)

    def prepare(self, seqs: Iterable[Sequence]) -> None:
        """The draft proposer: run the draft model once for the step's decoding requests (a
        batch), so ``propose`` hands each its share. A request with images gets none (the
        draft model is text-only)."""
        if self.draft is None:
            return
        wants = [(seq, room) for seq in seqs
                 if not seq.images and not (tally := self._tally(seq.seq_no)).pause
                 and (room := self._room(seq, tally)) > 0]
        start = time.perf_counter()
        self.pending = self.draft.propose(wants) if wants else {}
        self.stats.propose_s += time.perf_counter() - start

    def propose(self, seq: Sequence) -> tuple[int, ...]:
        """Draft tokens for ``seq``'s next step (it decodes: one token left to compute)."""
        tally = self._tally(seq.seq_no)
        room = self._room(seq, tally)
        if room <= 0:
            return ()
        if tally.pause:
            tally.pause -= 1
            return ()
        if self.draft is not None:
            return self.pending.pop(seq.seq_no, ())[:room]
        if self.mtp is not None:  # made by the last forward: one draft
            return self.mtp.propose(seq)
        start = time.perf_counter()
        drafts = tally.index.propose(seq.token_ids, room)
        self.stats.propose_s += time.perf_counter() - start
        return tuple(drafts)

    def _tally(self, seq_no: int) -> _Tally:
        tally = self.tallies.get(seq_no)
        if tally is None:
            tally = self.tallies[seq_no] = _Tally(NgramIndex(self.min_n, self.max_n),
                                                  self.num_tokens)
        return tally

    def record(self, seq_no: int, proposed: int, accepted: int) -> None:
        """A row verified ``proposed`` drafts, ``accepted`` of them; the floor may turn it off."""
        s = self.stats
        s.proposed += proposed
        s.accepted += accepted
        s.steps += 1
        tally = self._tally(seq_no)
        tally.verified(proposed, accepted, self.num_tokens)
        if (not tally.off and tally.proposed >= FLOOR_AFTER_ROUNDS * self.num_tokens
                and tally.accepted < self.min_acceptance * tally.proposed):
            tally.off = True
            s.stopped += 1

    def release(self, seq_no: int) -> None:
        """A preempted request: its draft (or MTP head) cache is freed (rebuilt when it runs
        again)."""
        for proposer in (self.draft, self.mtp):
            if proposer is not None:
                proposer.release(seq_no)

    def forget(self, seq_no: int) -> None:
        self.tallies.pop(seq_no, None)
        self.release(seq_no)

