"""The grammar thread: fills each step's token bitmask while the forward runs, and advances the
xgrammar matchers with the tokens sampled for them.

Only this thread touches a matcher, so exactly one thread writes it. The sampling thread hands it
work in step order: ``start(rows)`` (before the forward) submits one job that first accepts the
tokens that earlier steps sampled for constrained rows (queued by ``accept``), then fills the
bitmask of this step's constrained rows; after the logits, ``apply`` masks them with xgrammar's
batched apply. A terminated grammar's row (a wasted row of a finished request) is left free.

A request verifying draft tokens (speculative decoding) has a row per position: its matcher
takes the drafts one by one, filling each next position's mask, stops at the first draft the
grammar refuses (that draft is rejected whatever is sampled), then rolls back what it took; only
the emitted tokens are accepted for good.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from mstar.engine.sampling.batch import StepRows
from mstar.engine.sampling.state import SamplingState
from mstar.engine.speculative.draft_rows import NO_DRAFT, DraftRows

# One queued accept: the constrained rows' states and rows, and the step's sampled tokens.
Accepts = tuple[list[SamplingState], list[int], torch.Tensor]


class GrammarMasks:
    """Used by the sampling thread only; the jobs it submits run on its one grammar thread."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._pool: ThreadPoolExecutor | None = None  # started by the first constrained step
        self._batch_matcher = None  # xgrammar's BatchGrammarMatcher, used on the grammar thread
        self._accepts: list[Accepts] = []

    def start(self, rows: StepRows, drafts: DraftRows | None = None) -> Future | None:
        """Submit the step's fill (after every accept queued so far): a Future of the bitmask."""
        if not rows.constrained:
            return None
        if self._pool is None:
            import xgrammar as xgr

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="mstar-grammar-mask")
            self._batch_matcher = xgr.BatchGrammarMatcher()
        accepts, self._accepts = self._accepts, []
        return self._pool.submit(_accept_then_fill, self._batch_matcher, accepts,
                                 rows.constrained, len(rows.slots), self.vocab_size, drafts)

    def accept(self, rows: StepRows, tokens: torch.Tensor,
               emitted: list[bool] | None = None) -> None:
        """The step sampled ``tokens``: the constrained rows' matchers take theirs (the emitted
        ones) in the next ``start``'s job."""
        taken = [(i, s) for i, s in rows.constrained if emitted is None or emitted[i]]
        if taken:
            self._accepts.append(([s for _, s in taken], [i for i, _ in taken], tokens))

    @staticmethod
    def apply(logits: torch.Tensor, rows: StepRows, bitmask: torch.Tensor) -> None:
        """Set to -inf, in place, every token a constrained row's grammar does not allow next."""
        import xgrammar as xgr

        xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device, non_blocking=True),
                                        indices=[i for i, _ in rows.constrained])

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _accept_then_fill(batch_matcher, accepts: list[Accepts],
                      constrained: list[tuple[int, SamplingState]], num_rows: int,
                      vocab_size: int, drafts: DraftRows | None) -> torch.Tensor:
    """On the grammar thread: advance the matchers, then the bitmask of ``constrained`` rows
    (a request's first position by a batch fill, the positions after its drafts one by one)."""
    import xgrammar as xgr

    for states, rows, tokens in accepts:
        ids = tokens.tolist()
        for state, row in zip(states, rows, strict=True):
            matcher = state.matcher()
            if not matcher.is_terminated():
                matcher.accept_token(ids[row])
    bitmask = xgr.allocate_token_bitmask(num_rows, vocab_size)
    live = [(row, state) for row, state in constrained if not state.matcher().is_terminated()
            and (drafts is None or drafts.offsets[row] == 0)]
    if live:
        batch_matcher.batch_fill_next_token_bitmask(
            [state.matcher() for _, state in live], bitmask, [row for row, _ in live])
    if drafts is not None:
        for row, state in live:
            _fill_after_drafts(state.matcher(), bitmask, row, drafts.follow)
    for row, state in constrained:
        allowed = state.grammar.result().allowed
        if allowed is not None and not state.matcher().is_terminated():
            bitmask[row] &= allowed
    return bitmask


def _fill_after_drafts(matcher, bitmask: torch.Tensor, row: int, follow: tuple[int, ...]) -> None:
    """The masks of the positions after ``row``'s drafts, each after the drafts before it; the
    matcher ends where it started. Positions after a draft the grammar refuses stay unfilled:
    that draft is rejected, so they are never emitted."""
    taken = 0
    while follow[row] != NO_DRAFT and matcher.accept_token(follow[row]):
        taken += 1
        row += 1
        if matcher.is_terminated():
            break
        matcher.fill_next_token_bitmask(bitmask, row)
    if taken:
        matcher.rollback(taken)
