"""Media parts into the token stream: the step's rows that cover a part's placeholder tokens take
its encoder node's output rows in place of their token embeddings (a prefill chunk may cover part
of a run of placeholders)."""

from __future__ import annotations

import torch

from mstar.engine.runner.encoder_nodes import EncoderNodes
from mstar.engine.runner.input_batch import InputBatch
from mstar.engine.runner.step_attention import on_device
from mstar.engine.schedule.scheduler_output import EncoderCounts, SchedulerOutput
from mstar.graph import EdgeKind
from mstar.models.media_part import MediaPart

# (a part, its encoder node, the part's output rows used, the step's token rows taking them)
Placement = tuple[MediaPart, str, list[int], list[int]]


def placeholders_in_step(batch: InputBatch, out: SchedulerOutput,
                         encoders: EncoderNodes) -> list[Placement]:
    """Each part fed as placeholder embeddings whose placeholders the step's rows cover."""
    found, first = [], 0
    for row in out.rows:
        req = batch.requests[batch.slot_of[row.seq_no]]
        for part, node in zip(req.parts, req.part_nodes, strict=True):
            if (part.offset < row.end and part.end > row.start
                    and encoders.feeds[node] is EdgeKind.PLACEHOLDER_EMBEDDINGS):
                picked = [j for j, p in enumerate(part.positions) if row.start <= p < row.end]
                found.append((part, node, picked,
                              [first + part.positions[j] - row.start for j in picked]))
        first += row.num_tokens
    return found


def merged_embeds(model, encoders: EncoderNodes, placements: list[Placement],
                  input_ids: torch.Tensor, counts: EncoderCounts) -> torch.Tensor:
    """The step's token embeddings with each part's encoder rows at its placeholders."""
    device = input_ids.device
    parts, rows = [], []
    for part, node, picked, token_rows in placements:
        encoded = encoders.output(part, node, counts)
        parts.append(encoded[on_device(picked, device)])
        rows += token_rows
    return model.merge(model.embed(input_ids), on_device(rows, device), torch.cat(parts))
