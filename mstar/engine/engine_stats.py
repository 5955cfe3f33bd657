"""One value with everything an engine reports about its load and work so far
(``LLMEngine.stats()``): the worker sends it as ``WorkerStats``, tests read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineStats:
    running: int  # requests in the batch
    waiting: int  # requests queued (new, preempted, or waiting for their grammar)
    free_blocks: int  # KV-cache blocks free (prefix-cached ones count as free)
    kv_cache_usage: float  # the share of KV-cache blocks in use, 0..1
    preemptions: int  # so far
    encoder_cache_hits: int = 0  # vision models: images whose encoder output was cached
    encoder_cache_misses: int = 0  # ... and images encoded
    encoder_seconds: float = 0.0  # in the vision encoder so far
    spec_method: str = ""  # speculative decoding ("" = off), totals so far:
    spec_proposed: int = 0  # draft tokens proposed
    spec_accepted: int = 0  # ... and accepted
    spec_propose_s: float = 0.0  # seconds proposing
    spec_verify_s: float = 0.0  # seconds in the forwards that verified drafts
    lora_loads: int = 0  # LoRA adapters read so far (start and run time)
    lora_evictions: int = 0  # ... and moved out of a device slot for another
