"""The one seam between the scheduler and speculative decoding.

The scheduler asks a ``Drafting`` for each fresh step's drafts (``plan``) and reports what each
row verified (``verified``); it tells it when a request leaves (``release`` on a preemption,
``forget`` when it finishes). ``Speculation`` is the real one; ``NO_DRAFTS`` stands in when
speculative decoding is off, so the scheduler never asks whether it is on. The step loop, for
its part, calls ``Speculation.observe`` once per serial step.

Speculative decoding runs in the serial loop only (a continuation step assumes one token per
row): ``OverlapPolicy`` keeps an engine that speculates serial, the one place of that rule.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Protocol

from mstar.engine.request.sequence import Sequence

Chunk = Callable[[Sequence, int, int], int]  # (request, start, budget left) -> tokens in the step


class Drafting(Protocol):
    recompute_rejected: bool  # a hybrid model: a row that rejected a draft runs again

    def plan(self, running: list[Sequence], budget: int, chunk: Chunk
             ) -> dict[int, tuple[int, ...]]:
        """Draft tokens by request number for a fresh step of ``running`` (in order) within
        ``budget`` tokens, each taking ``chunk`` of its pending tokens (the scheduler's rule); a
        request without drafts is absent."""
        ...

    def verified(self, seq_no: int, drafts: Seq[int], sampled: Seq[int]) -> int:
        """A row verified ``drafts`` (``sampled``: its tokens, one per position): how many of
        them are accepted."""
        ...

    def release(self, seq_no: int) -> None: ...

    def forget(self, seq_no: int) -> None: ...


class NoDrafts:
    """Speculative decoding off: no step has drafts."""

    recompute_rejected = False
    _NONE: dict[int, tuple[int, ...]] = {}  # shared and never written: no allocation per step

    def plan(self, running: list[Sequence], budget: int, chunk: Chunk
             ) -> dict[int, tuple[int, ...]]:
        return self._NONE

    def verified(self, seq_no: int, drafts: Seq[int], sampled: Seq[int]) -> int:
        raise AssertionError("no row has drafts when speculative decoding is off")

    def release(self, seq_no: int) -> None:
        pass

    def forget(self, seq_no: int) -> None:
        pass


NO_DRAFTS = NoDrafts()
