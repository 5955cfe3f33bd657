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
  with each consecutive miss, at most ``tally.MAX_PAUSE``), reset by an accepted draft;
- a request stops speculating for good when its accepted share of its drafts falls below
  ``MSTAR_SPECULATIVE_MIN_ACCEPTANCE`` (after ``FLOOR_AFTER_ROUNDS * k`` proposed);
- each step, the verify gate (``gate``) keeps only the drafts whose expected tokens pay for the
  positions they add at this step's size on this machine: the floor that weighs the batch size.
  A request's chance of a draft being accepted is its history's (``Tally.acceptance``), which
  starts from the recent requests' (``RecentAcceptance``): a chat request among chat requests is
  not expected to accept like a copy task.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mstar.engine.request.sequence import Sequence
from mstar.engine.speculative.drafting import Chunk
from mstar.engine.speculative.gate import VerifyGate, together, worth
from mstar.engine.speculative.ngram import NgramIndex
from mstar.engine.speculative.tally import RecentAcceptance, Tally
from mstar.engine.speculative.verify import accept
from mstar.settings import WorkerSettings

if TYPE_CHECKING:
    from mstar.engine.speculative.draft_model import DraftModel
    from mstar.engine.speculative.mtp_proposer import MtpProposer

FLOOR_AFTER_ROUNDS = 4  # proposed >= this * k before the acceptance floor applies


@dataclass
class SpeculationStats:
    """Totals since start, per method (only one runs at a time): what ``/metrics`` shows."""

    method: str
    proposed: int = 0
    accepted: int = 0
    steps: int = 0  # rows that verified drafts
    stopped: int = 0  # requests turned off by the acceptance floor
    held: int = 0  # drafts the verify gate did not verify (or have drafted)
    propose_s: float = 0.0  # proposing drafts
    verify_s: float = 0.0  # the forwards (and sampling) of steps that verified drafts


def _budget(seq: Sequence) -> int:
    """The output tokens ``seq`` may still emit."""
    return seq.params.max_tokens - seq.num_output_tokens


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
    gate: VerifyGate = field(default_factory=VerifyGate)
    tallies: dict[int, Tally] = field(default_factory=dict)
    recent: RecentAcceptance = field(default_factory=RecentAcceptance)
    proposed_by: float = 0.0  # stats.propose_s at the last observed step

    def __post_init__(self) -> None:
        self.stats = SpeculationStats(self.method)

    @classmethod
    def from_settings(cls, settings: WorkerSettings, hybrid: bool,
                      draft: DraftModel | None = None,
                      mtp: MtpProposer | None = None) -> Speculation:
        return cls(settings.speculative_method, settings.num_speculative_tokens,
                   min(settings.ngram_min_n, settings.ngram_max_n), settings.ngram_max_n,
                   settings.speculative_min_acceptance, recompute_rejected=hybrid, draft=draft,
                   mtp=mtp, gate=VerifyGate(settings.speculative_gate))

    def _room(self, seq: Sequence, tally: Tally) -> int:
        """Drafts ``seq`` may get: its draft length, at most one token fewer than its remaining
        output (so a row never runs past max_tokens); 0 once the floor turned it off."""
        return 0 if tally.off else min(tally.length, _budget(seq) - 1)

    def plan(self, running: list[Sequence], budget: int, chunk: Chunk
             ) -> dict[int, tuple[int, ...]]:
        """The drafts of a fresh step of the ``running`` requests (oldest first) within
        ``budget`` tokens, each running ``chunk`` of its pending ones: proposed for those that
        decode (one token to compute) and gated for a step of the running requests' tokens. A
        hybrid model's row that recomputes after a rejection has more tokens and proposes none,
        so its state catches up before the next verify."""
        tokens = outputs = 0
        decoding = []
        for seq in running:
            left = len(seq) - seq.num_computed_tokens
            n = chunk(seq, seq.num_computed_tokens, budget - tokens) if tokens < budget else 0
            if n <= 0:
                break
            tokens += n
            outputs += n == left
            if left == 1:
                decoding.append(seq)
        return self._plan(decoding, tokens, outputs)

    def _plan(self, seqs: list[Sequence], step_tokens: int, step_outputs: int
              ) -> dict[int, tuple[int, ...]]:
        """Drafts for the step's decoding requests ``seqs`` (one token left to compute each), as
        many as the gate admits for a step that without drafts computes ``step_tokens`` tokens
        and samples ``step_outputs``; by request number, none for a request without drafts.
        The draft model drafts only what the gate admits (one batched run; nothing for a
        request with media parts: the draft model is text-only); the other proposers propose first."""
        if self.draft is not None:
            wants = [(seq, room) for seq in seqs if not seq.parts and (room := self._wants(seq))]
            lengths = self._gate([seq for seq, _ in wants], [room for _, room in wants],
                                 step_tokens, step_outputs, seqs)
            wants = [(seq, n) for (seq, _), n in zip(wants, lengths, strict=True) if n]
            start = time.perf_counter()
            drafts = self.draft.propose(wants) if wants else {}
            took = time.perf_counter() - start
            self.stats.propose_s += took
            self.gate.observe_drafts(sum(map(len, drafts.values())), took)
            return drafts
        proposals = [(seq, drafts) for seq in seqs if (drafts := self.propose(seq))]
        lengths = self._gate([seq for seq, _ in proposals], [len(d) for _, d in proposals],
                             step_tokens, step_outputs, seqs)
        return {seq.seq_no: drafts[:n]
                for (seq, drafts), n in zip(proposals, lengths, strict=True) if n}

    def _gate(self, seqs: list[Sequence], most: list[int], step_tokens: int,
              step_outputs: int, decoding: list[Sequence]) -> list[int]:
        """The gate's draft lengths for ``seqs`` (at most ``most``), of the step's ``decoding``
        rows (the rows of a remaining budget end together: ``gate.together``). A seeded sampled
        request verifies all of its drafts, in the step's tokens before the gate weighs the
        others: its generator draws once per verified position, so what it emits must not depend
        on the gate's timings (it is reproducible run to run)."""
        if not seqs:
            return []
        lengths = list(most)
        prior = self.recent.prior()
        acceptance = [self._tally(seq.seq_no).acceptance(prior) for seq in seqs]
        budgets = [_budget(seq) for seq in seqs]
        idle = Counter(_budget(seq) for seq in decoding)
        idle.subtract(budgets)
        ends = together(acceptance, most, budgets, idle)
        gated = [i for i, seq in enumerate(seqs) if seq.generator is None or seq.params.greedy]
        pinned = [i for i, seq in enumerate(seqs) if i not in gated]
        chosen = self.gate.lengths([acceptance[i] for i in gated], [most[i] for i in gated],
                                   step_tokens + sum(most[i] for i in pinned),
                                   step_outputs + sum(worth(acceptance[i], most[i])
                                                      for i in pinned),
                                   [ends[i] for i in gated])
        for i, n in zip(gated, chosen, strict=True):
            lengths[i] = n
        self.stats.held += sum(most) - sum(lengths)
        return lengths

    def _wants(self, seq: Sequence) -> int:
        """How many drafts ``seq`` may verify this step: its room, 0 while paused (a step of
        the pause passes)."""
        tally = self._tally(seq.seq_no)
        room = self._room(seq, tally)
        if room <= 0:
            return 0
        if tally.pause:
            tally.pause -= 1
            return 0
        return room

    def propose(self, seq: Sequence) -> tuple[int, ...]:
        """The n-gram or MTP proposer's drafts for ``seq``'s next step (it decodes: one token
        left to compute)."""
        room = self._wants(seq)
        if not room:
            return ()
        if self.mtp is not None:  # made by the last forward: one draft
            return self.mtp.propose(seq)
        start = time.perf_counter()
        drafts = self._tally(seq.seq_no).index.propose(seq.token_ids, room)
        self.stats.propose_s += time.perf_counter() - start
        return tuple(drafts)

    def _tally(self, seq_no: int) -> Tally:
        tally = self.tallies.get(seq_no)
        if tally is None:
            tally = self.tallies[seq_no] = Tally(NgramIndex(self.min_n, self.max_n),
                                                  self.num_tokens)
        return tally

    def verified(self, seq_no: int, drafts: tuple[int, ...], sampled: list[int]) -> int:
        """A row verified ``drafts`` (``sampled``: one token per position): how many of them
        are accepted, recorded."""
        accepted = accept(drafts, sampled)
        self.record(seq_no, len(drafts), accepted)
        return accepted

    def observe(self, step_tokens: int, seconds: float, forward_s: float, verifies: bool
                ) -> float:
        """A serial step of ``step_tokens`` tokens took ``seconds`` (``forward_s`` of them in its
        forward, which verified drafts when ``verifies``): the verify gate learns what a step
        costs without the proposals. Returns the seconds spent proposing since the last step."""
        proposing = self.stats.propose_s - self.proposed_by
        self.proposed_by = self.stats.propose_s
        if verifies:
            self.stats.verify_s += forward_s
        self.gate.observe_step(step_tokens, seconds - proposing, verifies)
        return proposing

    def record(self, seq_no: int, proposed: int, accepted: int) -> None:
        """A row verified ``proposed`` drafts, ``accepted`` of them; the floor may turn it off."""
        s = self.stats
        s.proposed += proposed
        s.accepted += accepted
        s.steps += 1
        tally = self._tally(seq_no)
        tally.verified(proposed, accepted, self.num_tokens)
        self.recent.add(accepted, accepted < proposed)
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

