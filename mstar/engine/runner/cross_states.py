"""The decoder's cross-attention keys and values (Whisper), kept per request for its life.

How they are kept: a per-request slot, not the paged KV cache. At the step that brings a request
to the runner (``SchedulerOutput.new``: its first prefill chunk, or its restart after a
preemption) the graph's encoder node runs on its audio window (``EncoderNodes``: in the worker,
or in a process of its own under MSTAR_ENCODER_PLACEMENT; its output kept in the encoder cache by
content hash, as every node's) and every decoder layer projects the output to K/V once:
[layers, 2, heads, 1500 frames, head_dim] (18 MiB for tiny.en in float32). Every later
step of the request, prefill chunks and decodes alike, attends to that tensor. The slot is freed
when the request leaves the runner (``SchedulerOutput.removed``: finished, aborted or preempted);
a preempted request recomputes it when it resumes, as its KV cache is recomputed.

Budget: one slot per running request, so at most ``max_num_seqs`` slots, held outside the paged
KV cache's budget (the engine logs the size at start). Requests with the same audio (the same
content hash) share one slot's tensor, counted by reference.

Owned by the model runner's thread, like the persistent batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from mstar.engine.runner.encoder_nodes import EncoderNodes
from mstar.engine.schedule.scheduler_output import EncoderCounts, NewRequest, SchedulerOutput
from mstar.graph import EdgeKind
from mstar.models.media_part import MediaPart


def cross_part(req: NewRequest, encoders: EncoderNodes) -> tuple[MediaPart, str] | None:
    """The request's cross-attention input and its encoder node: the part whose node's edge
    carries cross-attention memory (its prefill walk, ``NewRequest.part_nodes``)."""
    return next(((p, node) for p, node in zip(req.parts, req.part_nodes, strict=True)
                 if encoders.feeds[node] is EdgeKind.CROSS_ATTENTION), None)


@dataclass
class _Kept:
    states: torch.Tensor  # [layers, 2, heads, frames, head_dim]
    refs: int


class CrossBatch:
    """One step's rows and their kept states, in row order; each decoder layer calls ``attend``."""

    def __init__(self, spans: list[tuple[int, torch.Tensor]]) -> None:
        self.spans = spans  # (the row's token count, its request's states)

    def attend(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """q [tokens, heads, head_dim] -> [tokens, heads, head_dim], each row on its own audio."""
        outs, i = [], 0
        scale = q.shape[-1] ** -0.5
        for n, states in self.spans:  # two matmuls: on CPU, several times faster than SDPA's
            k, v = states[layer]  # dispatch for a few queries over 1500 frames
            scores = torch.matmul(q[i:i + n].transpose(0, 1) * scale, k.transpose(1, 2))
            outs.append(torch.matmul(scores.softmax(dim=-1), v).transpose(0, 1))
            i += n
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class CrossStates:
    """``encoders``: the graph's encoder nodes (the cross-attention node's output, through its
    cache); ``project``: that output -> its states (each decoder layer's K/V projections)."""

    def __init__(self, encoders: EncoderNodes,
                 project: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.encoders = encoders
        self.project = project
        self.kept: dict[str, _Kept] = {}  # content hash -> states
        self.owner: dict[int, str] = {}  # seq_no -> the content hash of its states

    def step(self, out: SchedulerOutput, counts: EncoderCounts) -> CrossBatch:
        """Apply the step's diffs (free the removed, compute the new), then its rows' states."""
        for seq_no in out.removed:
            self.release(seq_no)
        for req in out.new:
            found = cross_part(req, self.encoders)
            if found is None:
                raise ValueError("an encoder-decoder model's request needs its audio")
            self.take(req.seq_no, *found, counts)
        return CrossBatch([(row.num_tokens, self.kept[self.owner[row.seq_no]].states)
                           for row in out.rows])

    def take(self, seq_no: int, part: MediaPart, node: str, counts: EncoderCounts) -> None:
        """Hold ``part``'s states for request ``seq_no``: kept already (another request's: a
        hit), or projected from the node's output (the encoder cache counts that one)."""
        self.release(seq_no)  # a resumed request: its old slot, if the removal has not come yet
        kept = self.kept.get(part.content_hash)
        if kept is None:
            encoded = self.encoders.output(part, node, counts)
            kept = self.kept[part.content_hash] = _Kept(self.project(encoded), 0)
        else:
            counts.hits += 1
        kept.refs += 1
        self.owner[seq_no] = part.content_hash

    def release(self, seq_no: int) -> None:
        key = self.owner.pop(seq_no, None)
        if key is None:
            return
        kept = self.kept[key]
        kept.refs -= 1
        if kept.refs == 0:
            del self.kept[key]

    @property
    def num_requests(self) -> int:
        return len(self.owner)


def state_bytes(config, dtype: torch.dtype) -> int:
    """One request's kept states: decoder layers x K and V x frames x d_model."""
    elem = torch.empty(0, dtype=dtype).element_size()
    return config.decoder_layers * 2 * config.max_source_positions * config.d_model * elem
