"""Where each sampled position of a step sits in its request's run of draft tokens.

A row that verifies ``k`` drafts is sampled at ``1 + k`` positions (``ScheduledRow.num_samples``):
position ``j`` predicts the token after its input, and draft ``j`` is the input that follows it.
The sampler must treat position ``j`` as if drafts ``0 .. j-1`` were already the request's output
(penalty counts, ``min_tokens``, the grammar's state), and it must take in (count, feed the
grammar) only the positions that are emitted: those whose earlier drafts were all accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

NO_DRAFT = -1  # the following draft of a run's last position


@dataclass(frozen=True)
class DraftRows:
    """Per sampled position (logits row), in step order: ``offsets[i]`` is its place ``j`` in its
    request's run (0 for a row without drafts), ``follow[i]`` the draft token after it (or
    ``NO_DRAFT``)."""

    offsets: tuple[int, ...]
    follow: tuple[int, ...]

    @classmethod
    def of(cls, rows: Sequence) -> DraftRows | None:
        """For a step's ``ScheduledRow``s; None when no row carries drafts (the common case)."""
        if not any(row.draft_token_ids and row.samples for row in rows):
            return None
        offsets: list[int] = []
        follow: list[int] = []
        for row in rows:
            if row.samples:
                offsets += range(row.num_samples)
                follow += [*row.draft_token_ids, NO_DRAFT]
        return cls(tuple(offsets), tuple(follow))

    def emitted(self, tokens: Sequence[int]) -> list[bool]:
        """Whether each position's token is emitted: every draft before it in its run matched
        the token sampled at the position before that draft."""
        out: list[bool] = []
        alive = True
        for j, draft, token in zip(self.offsets, self.follow, tokens, strict=True):
            alive = alive or j == 0
            out.append(alive)
            alive = alive and token == draft
        return out

    def preceding(self) -> list[tuple[int, int]]:
        """(position, draft) for every draft before each position in its run: the tokens a
        position's penalties count as already output."""
        return [(i, self.follow[i - m]) for i, j in enumerate(self.offsets)
                for m in range(1, j + 1)]

    def counts(self, rows: Sequence[int], vocab_size: int,
               device: torch.device) -> torch.Tensor | None:
        """[len(rows), vocab] counts of the drafts before each of the positions ``rows`` (the
        penalised ones), added to their requests' output counts; None when none has one."""
        where = {i: r for r, i in enumerate(rows)}
        pairs = [(where[i], d) for i, d in self.preceding() if i in where]
        if not pairs:
            return None
        index = torch.tensor(pairs, dtype=torch.int64, device=device)
        out = torch.zeros(len(rows), vocab_size, device=device)
        out.index_put_((index[:, 0], index[:, 1]), torch.ones(len(pairs), device=device),
                       accumulate=True)
        return out
