"""Qwen3-Omni's thinker: the rows its talker reads, handed out for the requests that ask
(``SamplingParams.thinker_rows``; docs/speech.rst, "How the talker consumes the thinker"):

- each generated token's input embedding, made when the token is sampled;
- the hidden state after the talker config's ``accept_hidden_layer`` layers at the prompt's media
  positions, kept by prompt position as prefill chunks compute them and sent once, with the
  request's first token (a recompute after a preemption computes them again and sends nothing).

The runner builds this only for a model whose registry entry declares it (``thinker_rows``), and
a step asks it for work only when its rows cover an asking request's media positions, so other
steps cost one check. Such a request gets no cached prefix (``BlockManager``): its media
positions' hidden states are made by its own prefill.
"""

from __future__ import annotations

import msgspec
import numpy as np
import torch

from mstar.engine.request.outputs import RequestOutput, ThinkerRows
from mstar.engine.runner.input_batch import InputBatch
from mstar.engine.runner.step_attention import on_device
from mstar.engine.schedule.scheduler_output import SchedulerOutput

# (request number, prompt positions, the step's token rows at them)
MediaRows = tuple[int, list[int], list[int]]


def _bytes(rows: torch.Tensor) -> bytes:
    return rows.float().cpu().numpy().astype("<f4").tobytes()


class ThinkerRowsHead:
    def __init__(self, model) -> None:
        self.model = model
        self.layer = model.talker_layer
        self.width = model.text_config.hidden_size
        self.media: dict[int, dict[int, torch.Tensor]] = {}  # request -> {position: row}

    def media_in_step(self, batch: InputBatch, out: SchedulerOutput) -> list[MediaRows]:
        """The media positions of asking requests that the step's rows compute."""
        found, first = [], 0
        for row in out.rows:
            req = batch.requests[batch.slot_of[row.seq_no]]
            if req.params.thinker_rows and req.parts:
                at = [p for part in req.parts for p in part.positions if row.start <= p < row.end]
                if at:
                    found.append((row.seq_no, at, [first + p - row.start for p in at]))
            first += row.num_tokens
        return found

    def forward(self, wanted: list[MediaRows], input_ids, positions, attn_metadata,
                inputs_embeds) -> torch.Tensor:
        """The step's forward, keeping the wanted rows' hidden states after ``layer`` layers."""
        hidden, kept = self.model.forward_keeping(input_ids, positions, attn_metadata,
                                                  inputs_embeds, self.layer)
        for seq_no, at, rows in wanted:
            picked = kept[on_device(rows, kept.device)].cpu()
            self.media.setdefault(seq_no, {}).update(zip(at, picked, strict=True))
        return hidden

    def after_sample(self, batch: InputBatch, out: SchedulerOutput,
                     token_ids: list[int]) -> dict[int, ThinkerRows]:
        """Each asking request's rows for its sampled tokens (``token_ids``, in row order)."""
        made, i = {}, 0
        for row in out.rows:
            n = row.num_samples
            req = batch.requests[batch.slot_of[row.seq_no]] if n else None
            if req is not None and req.params.thinker_rows:
                ids = on_device(token_ids[i:i + n], self.model.model.embed_tokens.weight.device)
                kept = self.media.pop(row.seq_no, {})
                first = row.end == req.num_prompt_tokens  # its first token: the prompt's rows
                at = sorted(kept) if first else []
                hidden = torch.stack([kept[p] for p in at]) if at else torch.zeros(0)
                made[row.seq_no] = ThinkerRows(self.width, _bytes(self.model.embed(ids)), at,
                                               _bytes(hidden))
            i += n
        if self.media:  # a request that left the batch before its first token (aborted, or
            # preempted: its recompute makes them again) keeps nothing here
            self.media = {k: v for k, v in self.media.items() if k in batch.slot_of}
        return made


def rows_array(data: bytes, width: int) -> np.ndarray:
    """A ``ThinkerRows`` field's rows as a float32 [n, width] array."""
    return np.frombuffer(data, dtype="<f4").reshape(-1, width)


def with_rows(output: RequestOutput, rows: ThinkerRows | None) -> RequestOutput:
    """``output`` carrying its request's rows of the step, one embedding per token it emits (a
    stop or a rejected draft may end it before the last sampled one)."""
    if rows is None:
        return output
    keep = len(output.new_token_ids) * rows.width * 4
    return msgspec.structs.replace(output, thinker_rows=msgspec.structs.replace(
        rows, embeds=rows.embeds[:keep]))
