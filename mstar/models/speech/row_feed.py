"""``RowFeed``: a request whose language model reads embedding rows, not token embeddings
(Qwen3-Omni's talker, ``omni_talker_model``): its prefill rows, then one row per decode step, and
the row a step reads once the rows have run out.

The rows are what ``omni_talker_inputs.TalkerInputs`` holds (``prompt`` [T, H], ``text`` [S, H],
``pad`` [H]). The per-step rows are a feed that grows while the request runs: the thinker makes
them one token at a time, so a caller appends rows as they come (``append``) and says when there
are no more (``finish``); step ``j`` (the input at prompt position ``T + j``) reads row ``j``, or
``pad`` once the feed is finished and shorter. Rows once appended never change, and the feed only
grows, so the runner's thread reads it while the caller's thread appends. A request may receive
every row up front (``RowFeed.whole``). The request's prompt token ids are ``T`` placeholders
(``placeholder_ids``): the scheduler counts positions by them; no position reads them. So the
prefix cache keys a block by its positions' rows too (``content_hash``), never by the
placeholders alone.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the prompt value names this type; the API server starts without torch
    import torch

PLACEHOLDER_ID = 0  # the token id a prompt row's position holds (never embedded)


class RowNotReady(LookupError):
    """A step needs a row the feed has not received, and the feed is not finished."""


@dataclass(eq=False)
class RowFeed:
    prompt: torch.Tensor  # [T, H]: the prefill rows
    pad: torch.Tensor  # [H]: each step's row once the feed is finished and has run out
    rows: list[torch.Tensor] = field(default_factory=list)  # [H] each: step j reads rows[j]
    finished: bool = False

    @classmethod
    def whole(cls, prompt: torch.Tensor, text: torch.Tensor, pad: torch.Tensor) -> RowFeed:
        """Every row up front: ``text`` [S, H], one per step, and no more."""
        feed = cls(prompt, pad)
        feed.append(text)
        feed.finish()
        return feed

    def append(self, rows: torch.Tensor) -> None:
        """More per-step rows, [n, H], in step order."""
        if self.finished:
            raise ValueError("the feed is finished: no rows may follow")
        self.rows.extend(rows.unbind(0))

    def finish(self) -> None:
        self.finished = True

    def ready(self, step: int) -> bool:
        """Whether step ``step``'s row is known (appended, or ``pad`` after the finish)."""
        return step < len(self.rows) or self.finished

    def row(self, step: int) -> torch.Tensor:
        """Step ``step``'s row: the ``step``-th appended, or ``pad`` after the last."""
        if step < len(self.rows):
            return self.rows[step]
        if self.finished:
            return self.pad
        raise RowNotReady(f"step {step}'s row has not arrived (the feed has {len(self.rows)})")

    def content_hash(self, start: int, end: int) -> str:
        """A hash of the rows positions [start, end) read (prefill rows, then step rows), for
        the prefix cache's block hash; a position whose row has not arrived makes it this
        feed's own (no other request's block matches it)."""
        import torch

        num_prompt = len(self.prompt)
        digest = hashlib.sha256()
        for position in range(start, end):
            step = position - num_prompt
            if step >= 0 and not self.ready(step):
                return f"pending:{id(self)}:{position}"
            row = self.prompt[position] if step < 0 else self.row(step)
            digest.update(row.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
        return digest.hexdigest()

    def placeholder_ids(self) -> list[int]:
        """The request's prompt token ids: one placeholder per prefill row."""
        return [PLACEHOLDER_ID] * len(self.prompt)
