"""Sizing of the recurrent-state slots (hybrid models): they come out of the cache budget before
the KV cache, capped at half of it; a budget too small for one slot is a clear start-up error."""

from __future__ import annotations

import pytest

from mstar.engine.kv.state_cache import slot_bytes

GIB = 1 << 30


def test_slots_are_sized_before_the_kv_cache(tiny_model_dir, make_engine):
    budget_gb = 0.0005  # ~524 KB: enough for the KV cache and a few slots, not for 256 slots
    engine = make_engine(tiny_model_dir("qwen3_5"), cpu_kv_cache_gb=budget_gb, max_num_seqs=256)
    runner = engine.model_runner
    per_slot = slot_bytes(runner.model, runner.dtype)
    budget = budget_gb * GIB
    assert runner.num_state_slots == int(budget * 0.5 // per_slot) < 256
    per_block = runner.kv_cache.numel() * runner.kv_cache.element_size() // runner.num_blocks
    assert runner.num_blocks == int((budget - runner.num_state_slots * per_slot) // per_block)
    assert engine.block_manager.state_slots.num_slots == runner.num_state_slots


def test_budget_smaller_than_one_slot_is_a_clear_error(tiny_model_dir, make_engine):
    with pytest.raises(ValueError, match="one sequence's recurrent state needs 11264 bytes"):
        make_engine(tiny_model_dir("qwen3_5"), cpu_kv_cache_gb=1e-8)
