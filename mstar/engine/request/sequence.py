"""A request's mutable state inside the engine."""

from __future__ import annotations

import enum
import itertools

import torch

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.sampling.state import SamplingState
from mstar.models.media_part import MediaPart
from mstar.models.speech.row_feed import RowFeed
from mstar.models.vision.inputs import ImageInput


class SequenceStatus(enum.Enum):
    WAITING = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()


class Sequence:
    """Token ids and progress of one request, on the main thread only.

    The scheduler alone writes ``status``, ``num_computed_tokens`` (tokens whose K/V are in the
    cache once the steps scheduled so far have run; after a preemption it drops to 0 and the
    prompt plus the outputs so far are recomputed) and ``token_ids`` (a sampled token is appended
    when its step's output arrives). Its KV blocks are the block manager's, keyed by ``seq_no``.
    """

    _numbers = itertools.count()

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        generator: torch.Generator | None,
        sampling_state: SamplingState | None = None,
        parts: tuple[MediaPart, ...] = (),
        part_nodes: tuple[str, ...] = (),
        adapter_load: int | None = None,
        feed: RowFeed | None = None,
    ) -> None:
        self.seq_no = next(Sequence._numbers)  # unique, unlike request ids which can be reused
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.generator = generator
        self.sampling_state = sampling_state  # see mstar/engine/sampling/state.py
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens found in the prefix cache at admission
        # Media parts (images, audio clips): each one's tensors, hash and placeholder positions,
        # and the graph's encoder node that takes it (``part_nodes[i]`` for ``parts[i]``).
        self.parts = parts
        self.part_nodes = part_nodes
        # LoRA: which load of its adapter it runs (``LoraSlots.load_no``); None: the base model
        self.adapter_load = adapter_load
        # Whisper: the no-speech probability, once the runner has run <|startoftranscript|>
        self.no_speech_prob: float | None = None
        # Speech models: each output token's frame of codes (the engine appends it with the token)
        self.frames: list[list[int]] = []
        # A model that reads embedding rows (Qwen3-Omni's talker): the request's rows
        self.feed = feed

    @property
    def images(self) -> tuple[ImageInput, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImageInput))

    def part_hashes_in(self, start: int, end: int) -> tuple[str, ...]:
        """Content hashes of the parts that condition positions [start, end): those whose
        placeholder runs overlap it, and every part without positions (cross-attention memory
        conditions every token); with embedding rows (``feed``), the hash of their rows."""
        found = tuple(p.content_hash for p in self.parts
                      if not p.positions or (p.offset < end and p.end > start))
        return found if self.feed is None else (*found, self.feed.content_hash(start, end))

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
