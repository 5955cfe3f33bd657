"""Per-request rope positions for models whose rope has several axes (M-RoPE, Qwen2.5-VL).

Such a model computes an image request's prompt positions once (``rope_positions``: a
[axes, prompt] table and a ``delta``); a token past the prompt (an output, a draft) sits at its
index + delta on every axis. Text-only requests keep their index on every axis. The runner
keeps the tables of its live requests, changed by each step's diffs like its input batch.
"""

from __future__ import annotations

import torch

from mstar.engine.schedule.scheduler_output import SchedulerOutput

AXES = 3


class RopePositions:
    def __init__(self, model) -> None:
        self.model = model
        self.tables: dict[int, tuple[torch.Tensor, int]] = {}  # request number -> (table, delta)

    def apply(self, out: SchedulerOutput) -> None:
        """The step's diffs: removed requests first, then new ones (a resumed one anew)."""
        for seq_no in out.removed:
            self.tables.pop(seq_no, None)
        for req in out.new:
            if req.images:
                prompt = req.token_ids[:req.num_prompt_tokens]
                self.tables[req.seq_no] = self.model.rope_positions(prompt, req.images)

    def step(self, out: SchedulerOutput, positions: torch.Tensor) -> torch.Tensor:
        """The step's positions: [axes, tokens] when a row has a table, else ``positions``."""
        if not any(row.seq_no in self.tables for row in out.rows):
            return positions
        parts, first = [], 0
        for row in out.rows:
            index = positions[first:first + row.num_tokens]
            first += row.num_tokens
            entry = self.tables.get(row.seq_no)
            if entry is None:
                parts.append(index.expand(AXES, -1))
                continue
            table, delta = entry
            in_prompt = index < table.shape[1]
            from_table = table[:, index.clamp(max=table.shape[1] - 1)]
            parts.append(torch.where(in_prompt, from_table, index + delta))
        return torch.cat(parts, dim=1)
