"""What a fresh step has left while the scheduler picks its rows: tokens, and placeholder rows per
encoder node. Made and spent by one ``Scheduler._fresh`` call, then dropped."""

from __future__ import annotations

from dataclasses import dataclass, field

from mstar.engine.schedule.scheduler_output import ScheduledRow


@dataclass
class StepBudget:
    tokens: int  # of the step's token budget (MSTAR_MAX_NUM_BATCHED_TOKENS)
    encoder: dict[str, int] = field(default_factory=dict)  # node -> rows left (absent: all)
    rows: list[ScheduledRow] = field(default_factory=list)  # the step's rows so far
    drafts: int = 0  # draft tokens among them

    def take(self, row: ScheduledRow) -> None:
        """A row joins the step: its tokens (drafts included) come out of the budget."""
        self.rows.append(row)
        self.tokens -= row.num_tokens
        self.drafts += len(row.draft_token_ids)
