"""The decoder's cross-attention keys and values (Whisper), kept per request for its life.

How they are kept: a per-request slot, not the paged KV cache. At the step that brings a request
to the runner (``SchedulerOutput.new``: its first prefill chunk, or its restart after a
preemption) the encoder runs on its audio window and every decoder layer projects the output to
K/V once: [layers, 2, heads, 1500 frames, head_dim] (18 MiB for tiny.en in float32). Every later
step of the request, prefill chunks and decodes alike, attends to that tensor. The slot is freed
when the request leaves the runner (``SchedulerOutput.removed``: finished, aborted or preempted);
a preempted request recomputes it when it resumes, as its KV cache is recomputed.

Budget: one slot per running request, so at most ``max_num_seqs`` slots, held outside the paged
KV cache's budget (the engine logs the size at start). Requests with the same audio (the same
content hash) share one slot's tensor, counted by reference.

Owned by the model runner's thread, like the persistent batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mstar.engine.schedule.scheduler_output import EncoderCounts, SchedulerOutput
from mstar.models.audio.inputs import AudioInput


def cross_part(parts) -> AudioInput | None:
    """The request's cross-attention input: its audio part with no placeholder positions."""
    return next((p for p in parts if isinstance(p, AudioInput) and not p.positions), None)


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
    """``compute``: an audio part's tensors -> its states (the model's encoder, then each layer's
    K/V projections)."""

    def __init__(self, compute: Callable[[dict[str, torch.Tensor]], torch.Tensor],
                 device: torch.device) -> None:
        self.compute = compute
        self.device = device
        self.kept: dict[str, _Kept] = {}  # content hash -> states
        self.owner: dict[int, str] = {}  # seq_no -> the content hash of its states

    def step(self, out: SchedulerOutput, counts: EncoderCounts) -> CrossBatch:
        """Apply the step's diffs (free the removed, compute the new), then its rows' states."""
        for seq_no in out.removed:
            self.release(seq_no)
        for req in out.new:
            part = cross_part(req.parts)
            if part is None:
                raise ValueError("an encoder-decoder model's request needs its audio")
            self.take(req.seq_no, part, counts)
        return CrossBatch([(row.num_tokens, self.kept[self.owner[row.seq_no]].states)
                           for row in out.rows])

    def take(self, seq_no: int, part: AudioInput, counts: EncoderCounts) -> None:
        self.release(seq_no)  # a resumed request: its old slot, if the removal has not come yet
        kept = self.kept.get(part.content_hash)
        if kept is None:
            counts.misses += 1
            start = time.perf_counter()
            tensors = {k: v.to(self.device) for k, v in part.tensors.items()}
            kept = self.kept[part.content_hash] = _Kept(self.compute(tensors), 0)
            counts.seconds += time.perf_counter() - start
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
