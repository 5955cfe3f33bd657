"""The values that cross from the scheduler to the model runner and back, one pair per step.

The scheduler owns every request's progress and the block manager its block ids; the model runner
keeps its own persistent copy (``mstar.engine.runner.input_batch``), changed only by these diffs. Both
values are immutable, so a step in flight on the forward thread shares nothing mutable with the
main thread, which meanwhile schedules the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mstar.engine.request.outputs import ThinkerRows, TokenLogprob
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.sampling.state import SamplingState
from mstar.models.media_part import MediaPart
from mstar.models.speech.row_feed import RowFeed
from mstar.models.vision.inputs import ImageInput


@dataclass(frozen=True)
class NewRequest:
    """A request the runner has not seen, or one resumed after a preemption (from scratch).

    ``token_ids``: every token known so far (prompt, then outputs). ``state_slot``: its
    recurrent-state slot (hybrid models). ``params``, ``generator`` and ``sampling_state`` are
    the sampler's inputs (the sampling state is the sampler's alone, see ``sampling_state``).
    """

    seq_no: int
    token_ids: tuple[int, ...]
    num_prompt_tokens: int
    state_slot: int | None
    params: SamplingParams
    generator: torch.Generator | None
    sampling_state: SamplingState | None
    parts: tuple[MediaPart, ...] = ()  # the media parts of its prompt (images, audio clips)
    part_nodes: tuple[str, ...] = ()  # each part's encoder node, on the request's prefill walk
    # Speech models: the frame (codes) of each output token so far, resumed after a preemption
    frames: tuple[list[int], ...] = ()
    feed: RowFeed | None = None  # its embedding rows (a model that reads them: the talker)

    @property
    def images(self) -> tuple[ImageInput, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImageInput))


@dataclass(frozen=True)
class ScheduledRow:
    """One request's part of a step: ``num_tokens`` tokens from position ``start`` (the tokens
    already in its KV cache when the step runs), and the blocks added to its table for them.

    ``samples``: the row reaches the request's end, so its last token's logits are sampled. A
    continuation row's input token is the one the previous step samples (a placeholder until it
    runs): the runner, which runs the steps in order, has it by then.

    ``draft_token_ids`` (speculative decoding, ``mstar.engine.speculative``): the row's last
    ``len(draft_token_ids)`` tokens are proposed, not yet the request's; the row is sampled at
    each of its last ``1 + len(draft_token_ids)`` positions to verify them.
    """

    seq_no: int
    start: int
    num_tokens: int
    new_block_ids: tuple[int, ...]
    samples: bool
    draft_token_ids: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        return self.start + self.num_tokens

    @property
    def num_samples(self) -> int:
        """Tokens sampled for the row: its positions that verify a draft, plus one."""
        return 1 + len(self.draft_token_ids) if self.samples else 0


@dataclass(frozen=True, eq=False)  # compared by identity: each step is its own value
class SchedulerOutput:
    """One step: the runner first drops ``removed`` (finished, aborted or preempted requests),
    adds ``new``, then runs ``rows`` (single-token rows first). ``continuation``: planned while
    the step before it ran (the overlapped loop's continuation). ``num_drafts``: the draft
    tokens its rows verify (speculative decoding; 0 in most steps)."""

    rows: tuple[ScheduledRow, ...]
    new: tuple[NewRequest, ...] = ()
    removed: tuple[int, ...] = ()
    continuation: bool = False
    num_drafts: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def num_tokens(self) -> int:
        return sum(r.num_tokens for r in self.rows)

    def request_keys(self) -> set[int]:
        return {r.seq_no for r in self.rows}


@dataclass(slots=True)
class EncoderCounts:
    """Encoder cache use, every encoder node together: parts found cached, parts encoded, seconds
    encoding. Per step (filled by the runner's thread) and, summed, the engine's totals (its own
    thread)."""

    hits: int = 0
    misses: int = 0
    seconds: float = 0.0

    def add(self, other: EncoderCounts) -> None:
        self.hits += other.hits
        self.misses += other.misses
        self.seconds += other.seconds


@dataclass(frozen=True)
class RunnerOutput:
    """The runner's answer for one step: a token per sampled position (``ScheduledRow.num_samples``
    of each row), in row order, and their logprobs when asked for. ``sample_slots``: the
    persistent-batch slots of those positions. ``pooled``: the vector of each pooling request
    whose prompt ended in the step, by request number (``mstar.engine.runner.pooling``). ``encoder``: what
    the step's images took from the vision encoder cache (None when it had none), so the counts
    cross from the forward thread with the step's output. ``no_speech``: Whisper's no-speech
    probability of each request whose <|startoftranscript|> the step ran, by request number
    (``mstar.engine.runner.no_speech``). ``frames``: speech models (a graph with a codec), the
    frame of codes each sampled row made, by request number (``mstar.models.speech.frame_head``);
    the sampled token is its code 0."""

    token_ids: list[int]
    logprobs: list[TokenLogprob | None] | None = None
    sample_slots: tuple[int, ...] = ()
    pooled: dict[int, bytes] = field(default_factory=dict)
    encoder: EncoderCounts | None = None
    no_speech: dict[int, float] = field(default_factory=dict)
    frames: dict[int, list[int]] = field(default_factory=dict)
    # Qwen3-Omni's thinker: each asking request's rows for its talker, by request number
    # (mstar.engine.runner.thinker_rows)
    thinker_rows: dict[int, ThinkerRows] = field(default_factory=dict)
