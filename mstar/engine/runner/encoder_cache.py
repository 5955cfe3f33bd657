"""The encoder nodes' outputs, kept by part content hash within MSTAR_ENCODER_CACHE_MB.

Owned by the model runner (the thread that runs the steps): a step's rows that cover a part's
placeholders (an image, an audio clip) take its output from here, encoding it on a miss. Least
recently used outputs are dropped first; an output larger than the whole cache is used once and
not kept. The cache keeps no counters: each ``get`` counts into the step's ``EncoderCounts``,
which travels back in the step's ``RunnerOutput`` (so no count is shared between threads).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import torch

from mstar.engine.schedule.scheduler_output import EncoderCounts
from mstar.models.media_part import MediaPart


class EncoderCache:
    def __init__(self, capacity_bytes: int, device: torch.device) -> None:
        self.capacity = capacity_bytes
        self.device = device
        self.entries: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.used = 0

    def get(self, image: MediaPart, encode: Callable[[dict], torch.Tensor],
            counts: EncoderCounts) -> torch.Tensor:
        """The part's encoder output (placeholder parts: rows [num_embeds, hidden]); the hit or
        miss goes to ``counts``."""
        out = self.entries.get(image.content_hash)
        if out is not None:
            self.entries.move_to_end(image.content_hash)
            counts.hits += 1
            return out
        counts.misses += 1
        start = time.perf_counter()
        out = encode({k: v.to(self.device) for k, v in image.tensors.items()})
        if image.positions and out.shape[0] != image.num_embeds:
            raise ValueError(f"the encoder gave {out.shape[0]} rows for a part with "
                             f"{image.num_embeds} placeholder tokens")
        counts.seconds += time.perf_counter() - start
        self._keep(image.content_hash, out)
        return out

    def _keep(self, key: str, out: torch.Tensor) -> None:
        size = out.numel() * out.element_size()
        if size > self.capacity:
            return
        while self.used + size > self.capacity:
            _, old = self.entries.popitem(last=False)
            self.used -= old.numel() * old.element_size()
        self.entries[key] = out
        self.used += size
