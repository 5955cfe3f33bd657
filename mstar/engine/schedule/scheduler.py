"""Continuous batching with chunked prefill and preemption by recompute.

The scheduler alone owns each request's progress (``status``, ``num_computed_tokens``, the
tokens appended from each step's output); the block manager owns its blocks. Every step is one
immutable ``SchedulerOutput`` from ``schedule()``, and its ``RunnerOutput`` comes back through
``update()``. ``num_computed_tokens`` counts the tokens scheduled so far: a step's sampled token is
in flight (a placeholder) until its output arrives.

A request that finishes or is aborted while a step in flight still has a row for it keeps its
blocks until that step's output arrives, so no block is freed while a forward may write to it.

Speculative decoding (``speculation``, serial loop only): a decoding request's row may carry draft
tokens after its input tokens; ``update`` keeps the accepted run plus one token and counts only
the accepted tokens as computed, so the K/V written for rejected drafts is overwritten by the
next step (the blocks grown for them stay with the request, for its next tokens). A hybrid
model's row that rejected a draft counts none of its tokens as computed: the runner restored its
recurrent state, and the next step runs them again (``speculative.state_rollback``).
"""

from __future__ import annotations

from collections import deque

import structlog

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.request.sequence import Sequence, SequenceStatus
from mstar.engine.schedule.emitted import Emitted, StopRule
from mstar.engine.schedule.feed_cut import feed_cut
from mstar.engine.schedule.image_cuts import encoder_cut, image_run_cut
from mstar.engine.schedule.overlap_policy import OverlapPolicy
from mstar.engine.schedule.prefill_chunk import chunk
from mstar.engine.schedule.prefill_share import PrefillShare, protected_rows
from mstar.engine.schedule.priority import NORMAL, Priorities
from mstar.engine.schedule.scheduler_output import NewRequest, RunnerOutput, ScheduledRow, SchedulerOutput
from mstar.engine.schedule.step_budget import StepBudget
from mstar.engine.speculative.drafting import NO_DRAFTS, Drafting
from mstar.models.lora.slots import fits_lora_slots

log = structlog.get_logger(__name__)


def ready_to_run(seq: Sequence) -> bool:
    """A request waits until its structured-output grammar has compiled (off the hot path)."""
    return seq.sampling_state is None or seq.sampling_state.grammar_ready


class Scheduler:
    """Decides every step which sequences run, within a token budget and a sequence cap.

    Running sequences go first (oldest first); when the KV cache is full the newest
    running sequence is preempted (its blocks freed, recomputed later) and goes back to the front
    of the queue, so the oldest request always makes progress. Waiting requests are admitted FCFS
    within their priority class, highest class first (``priority``), skipping those whose grammar
    is still compiling.
    """

    def __init__(self, block_manager: BlockManager, max_num_seqs: int,
                 max_num_batched_tokens: int, policy: OverlapPolicy | None = None,
                 max_encoder_tokens: int = 2**31 - 1,
                 speculation: Drafting = NO_DRAFTS, whole_image_runs: bool = False,
                 prefill_cap: int | None = None, share: PrefillShare | None = None,
                 priority_preemption: bool = True, max_loras: int | None = None) -> None:
        self.block_manager = block_manager
        # what a prompt being prefilled may take beside decodes (``prefill_share``); None: off
        self.share = PrefillShare(0.0) if share is None else share
        self.max_loras = max_loras  # LoRA: distinct adapters among running requests; None = off
        # most tokens of one request per step (``prefill_chunk``); None: the step's budget
        self.prefill_cap = max_num_batched_tokens if prefill_cap is None else prefill_cap
        self.whole_image_runs = whole_image_runs  # chunks never end inside an image's run
        self.max_encoder_tokens = max_encoder_tokens  # placeholder rows per encoder node per step
        self.speculation = speculation
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.policy = policy
        self.waiting: deque[Sequence] = deque()  # highest class first (``priority``)
        self.priorities = Priorities(priority_preemption)
        self.running: list[Sequence] = []
        self.live: dict[int, Sequence] = {}  # seq_no -> unfinished request
        self.num_preemptions = 0
        self.in_flight: list[SchedulerOutput] = []  # issued, output not yet applied
        self.retiring: list[int] = []  # finished, but a step in flight still has a row for them
        self.removed: list[int] = []  # for the runner to drop, sent with the next step
        self.known: set[int] = set()  # requests the runner holds a row slot for

    def add(self, seq: Sequence, priority: int = NORMAL) -> None:
        self.priorities.add(self.waiting, seq, priority)
        self.live[seq.seq_no] = seq

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def can_admit(self) -> bool:
        """Whether a fresh schedule() could start a waiting (or preempted) request now."""
        if len(self.running) < self.max_num_seqs:
            return self._next_admissible() is not None
        head = self._next_admissible() if self.priorities.mixed else None
        return head is not None and self.priorities.victim(self.running, head) is not None

    def _next_admissible(self) -> Sequence | None:
        """The oldest waiting sequence that is ready to run (FCFS among the ready ones)."""
        if self.max_loras is None:
            return next((seq for seq in self.waiting if ready_to_run(seq)), None)
        loras = {seq.params.lora for seq in self.running} - {None}
        return next((seq for seq in self.waiting if ready_to_run(seq)
                     and fits_lora_slots(seq.params.lora, loras, self.max_loras)), None)

    # ---- the one entry point -------------------------------------------------------------

    def schedule(self, after: SchedulerOutput | None = None) -> SchedulerOutput | None:
        """The next step, or None when there is nothing to run.

        ``after``: the step in flight (the overlapped loop). Then the next step continues it by
        one token for every request it samples, counting that token as in flight, when the
        overlap policy says so and the KV cache holds the extra tokens; else None, and the loop
        asks again for a fresh step once ``after``'s output is in.
        """
        if after is None:
            rows, new, drafts = self._fresh()
        else:
            rows, new, drafts = self._continue(after), [], 0
        if not rows:
            return None
        rows.sort(key=lambda r: r.num_tokens != 1)  # decodes first: batched by the backend
        out = SchedulerOutput(tuple(rows), tuple(new), tuple(self.removed), after is not None,
                              drafts)
        self.removed = []
        self.in_flight.append(out)
        if after is None:
            self.share.issued(out)
        return out

    def _row(self, seq: Sequence, num_tokens: int, new_blocks: tuple[int, ...],
             drafts: tuple[int, ...] = ()) -> ScheduledRow:
        start = seq.num_computed_tokens
        seq.num_computed_tokens = start + num_tokens + len(drafts)
        return ScheduledRow(seq.seq_no, start, num_tokens + len(drafts), new_blocks,
                            samples=start + num_tokens >= len(seq), draft_token_ids=drafts)

    def _chunk(self, seq: Sequence, start: int, budget: int) -> int:
        """Tokens of ``seq`` to run from ``start`` with ``budget`` left (before image cuts)."""
        return chunk(seq, start, budget, self.prefill_cap, self.whole_image_runs)

    def _part_cut(self, seq: Sequence, start: int, n: int, encoder: dict[str, int]) -> int:
        """``encoder_cut`` with the step's encoder budget left per node (``encoder``, spent
        here), after ``image_run_cut`` for models that need whole image runs."""
        if self.whole_image_runs:
            n = image_run_cut(seq, start, n)
        n, used = encoder_cut(seq, start, n, encoder, self.max_encoder_tokens)
        if n:
            for node, rows in used.items():
                encoder[node] = encoder.get(node, self.max_encoder_tokens) - rows
        return n

    def _drafts(self, seq: Sequence, n: int, budget: int,
                planned: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
        """A decoding row's planned drafts, trimmed to the budget; none when its blocks do not
        fit them."""
        drafts = planned.get(seq.seq_no, ())[: budget - n] if n == 1 else ()
        if drafts and not self.block_manager.can_grow_to(seq.seq_no, len(seq) + len(drafts)):
            return ()
        return drafts

    def _fresh(self) -> tuple[list[ScheduledRow], list[NewRequest], int]:
        """A fresh step's rows, its new requests and its number of draft tokens: the running
        requests first (oldest first, preempting the newest when the KV cache is full), then,
        if none was preempted, waiting ones while the budget and the sequence cap allow."""
        assert not self.in_flight, "a fresh step (which may preempt) needs no step in flight"
        planned = self.speculation.plan(self.running, self.max_num_batched_tokens, self._chunk)
        budget = StepBudget(self.max_num_batched_tokens)
        shared = self.share.share > 0 and self.share.begin(protected_rows(
            self.running, self._next_admissible() if len(self.running) < self.max_num_seqs
            else None, self.prefill_cap))
        self._preempt_for_priority()
        preempted = self._continue_running(budget, planned, shared)
        new = [] if preempted else self._admit_waiting(budget)
        return budget.rows, new, budget.drafts

    def _continue_running(self, budget: StepBudget, planned: dict[int, tuple[int, ...]],
                          shared: bool) -> bool:
        """The running requests' rows, into ``budget``; whether any request was preempted."""
        bm, cap = self.block_manager, self.prefill_cap
        preempted = False
        i = 0
        while i < len(self.running) and budget.tokens > 0:
            seq = self.running[i]
            n = len(seq) - seq.num_computed_tokens  # a decode: 1 (the common case, no call)
            if n > budget.tokens or n > cap:  # a prompt, or a preempted request's recomputation
                n = self._chunk(seq, seq.num_computed_tokens, budget.tokens)
            long_prompt = n > 1 and seq.num_prompt_tokens > cap  # only a prompt of several
            # chunks shares its steps: a short one runs whole at once, as without the rule
            if shared and long_prompt:
                n = self.share.chunk(seq, n, self.whole_image_runs)
                if n == 0:  # it waits for a step whose share pays for a chunk
                    i += 1
                    continue
            if seq.parts:
                n = self._part_cut(seq, seq.num_computed_tokens, n, budget.encoder)
                if n == 0:  # its next part waits for a step with encoder budget left
                    i += 1
                    continue
            if seq.feed is not None:
                n = feed_cut(seq, seq.num_computed_tokens, n)
                if n == 0:  # its next position's embedding row has not arrived
                    i += 1
                    continue
            total = seq.num_computed_tokens + n
            while not bm.can_grow_to(seq.seq_no, total):
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    return preempted
            drafts = self._drafts(seq, n, budget.tokens, planned)
            budget.take(self._row(seq, n, bm.grow_to(seq.seq_no, total + len(drafts)), drafts))
            i += 1
        return preempted

    def _admit_waiting(self, budget: StepBudget) -> list[NewRequest]:
        """Waiting requests started into ``budget`` (FCFS among the ready ones, highest class
        first), each with its prompt's cached prefix counted as computed."""
        bm = self.block_manager
        new: list[NewRequest] = []
        while self.waiting and budget.tokens > 0 and len(self.running) < self.max_num_seqs:
            seq = self._next_admissible()
            num_cached = None if seq is None else bm.allocate_prompt(seq, budget.tokens)
            if num_cached is None:
                break
            n = self._chunk(seq, num_cached, budget.tokens)
            if seq.parts:
                n = self._part_cut(seq, num_cached, n, budget.encoder)
                if n == 0:  # its first part waits for a step with encoder budget left
                    bm.free_request(seq.seq_no)
                    break
            if seq.feed is not None:
                n = feed_cut(seq, num_cached, n)
                if n == 0:  # resumed: its next frame's embedding row has not arrived
                    bm.free_request(seq.seq_no)
                    break
            self.waiting.remove(seq)
            seq.status = SequenceStatus.RUNNING
            seq.num_computed_tokens = seq.num_cached_tokens = num_cached
            self.running.append(seq)
            new.append(NewRequest(seq.seq_no, tuple(seq.token_ids), seq.num_prompt_tokens,
                                  bm.state_slot(seq.seq_no),
                                  seq.params, seq.generator, seq.sampling_state, seq.parts,
                                  seq.part_nodes, tuple(seq.frames), seq.feed))
            self.known.add(seq.seq_no)
            budget.take(self._row(seq, n, tuple(bm.block_ids(seq.seq_no))))
        return new

    def _preempt_for_priority(self) -> None:
        """A full batch: the first waiting request may take a lower class's slot (``priority``)."""
        if len(self.running) < self.max_num_seqs or not self.priorities.mixed:
            return
        head = self._next_admissible()
        victim = None if head is None else self.priorities.victim(self.running, head)
        if victim is not None:
            self.running.remove(victim)
            self._preempt(victim)

    def _continue(self, after: SchedulerOutput) -> list[ScheduledRow]:
        if self.policy is None or not self.policy.should_continue(self.can_admit):
            return []
        seqs = [self.live[r.seq_no] for r in after.rows  # a pooling request ends at its prompt
                if r.samples and r.seq_no in self.live and not self.live[r.seq_no].is_finished
                and self.live[r.seq_no].params.pooling is None
                and feed_cut(self.live[r.seq_no], self.live[r.seq_no].num_computed_tokens, 1)]
        totals = [seq.num_computed_tokens + 1 for seq in seqs]
        seq_nos = [seq.seq_no for seq in seqs]
        if not seqs or not self.block_manager.can_grow_all(seq_nos, totals):
            return []
        return [self._row(seq, 1, self.block_manager.grow_to(seq.seq_no, total))
                for seq, total in zip(seqs, totals, strict=True)]

    # ---- a step's output comes back ---------------------------------------------------------

    def update(self, out: SchedulerOutput, result: RunnerOutput,
               stop: StopRule) -> list[Emitted]:
        """Apply a finished step: publish full blocks, append each row's sampled tokens. A row
        that verified drafts emits its accepted run plus one. After each token ``stop`` says
        whether it ends the request; one that ends is finished here and its later tokens
        dropped. Returns what every row of a still unfinished request emitted, in row order
        (the finished ones with their reason). Rows of requests that finished or were aborted
        after the step was scheduled are wasted, never emitted."""
        self.in_flight.remove(out)
        self.share.done(out)
        emitted: list[Emitted] = []
        logprobs = result.logprobs
        k = 0
        for row in out.rows:
            n = row.num_samples
            seq = self.live.get(row.seq_no)
            if seq is not None and seq.status is SequenceStatus.RUNNING:
                tokens = result.token_ids[k : k + n]
                if row.draft_token_ids:
                    tokens = tokens[: self._verified(seq, row, tokens)]
                self.block_manager.commit_full_blocks(seq, seq.num_computed_tokens)
                if tokens:
                    asked = (logprobs[k : k + len(tokens)] if logprobs and logprobs[k] is not None
                             else None)
                    emitted.append(self._emit(seq, tokens, asked, stop))
            k += n
        self._free_retired()
        return emitted

    def _emit(self, seq: Sequence, tokens: list[int], logprobs: list | None,
              stop: StopRule) -> Emitted:
        """Append ``tokens`` to ``seq`` until one ends it (then it is finished)."""
        for i, token in enumerate(tokens):
            seq.append_token(token)
            reason = stop(seq, token)
            if reason is not None:
                self.finish(seq)
                if i + 1 < len(tokens):
                    tokens = tokens[: i + 1]
                    logprobs = logprobs[: i + 1] if logprobs else logprobs
                return Emitted(seq, tokens, logprobs, reason)
        return Emitted(seq, tokens, logprobs, None)

    def _verified(self, seq: Sequence, row: ScheduledRow, tokens: list[int]) -> int:
        """How many of the row's sampled tokens it emits (accepted drafts plus one); only the
        accepted drafts' K/V count as computed (none of the row's tokens where a rejection
        rolled back a recurrent state)."""
        drafts = row.draft_token_ids
        accepted = self.speculation.verified(seq.seq_no, drafts, tokens)
        rejected = len(drafts) - accepted
        recompute = rejected and self.speculation.recompute_rejected
        seq.num_computed_tokens = row.start if recompute else row.end - rejected
        return accepted + 1

    def _in_flight(self, seq_no: int) -> bool:
        return any(row.seq_no == seq_no for out in self.in_flight for row in out.rows)

    def _free_retired(self) -> None:
        keep = []
        for seq_no in self.retiring:
            if self._in_flight(seq_no):
                keep.append(seq_no)
            else:
                self.block_manager.free_request(seq_no)
        self.retiring = keep

    def _forget(self, seq: Sequence) -> None:
        """The runner drops the request's row with the next step."""
        if seq.seq_no in self.known:
            self.known.discard(seq.seq_no)
            self.removed.append(seq.seq_no)

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free_request(seq.seq_no)  # nothing in flight: see _fresh
        self.speculation.release(seq.seq_no)
        self._forget(seq)
        seq.num_computed_tokens = 0
        seq.status = SequenceStatus.WAITING
        self.priorities.requeue(self.waiting, seq)
        self.num_preemptions += 1
        log.debug("preempted", request_id=seq.request_id, num_tokens=len(seq))

    def finish(self, seq: Sequence) -> None:
        """Finished or aborted, the same way: out of the queues at once; its blocks are freed now,
        or once the last step in flight with a row for it is done."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        else:
            return
        seq.status = SequenceStatus.FINISHED
        del self.live[seq.seq_no]
        self.priorities.forget(seq)
        self.speculation.forget(seq.seq_no)
        self._forget(seq)
        if self._in_flight(seq.seq_no):
            self.retiring.append(seq.seq_no)
        else:
            self.block_manager.free_request(seq.seq_no)
