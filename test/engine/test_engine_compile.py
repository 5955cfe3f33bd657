"""MSTAR_COMPILE: the compiled model gives the same tokens, with MSTAR_RECOMPILE_LIMIT applied."""

from __future__ import annotations

import torch._dynamo

from mstar.engine.request.sampling_params import SamplingParams


def test_compiled_engine_matches_eager_and_applies_the_recompile_limit(tiny_model_dir,
                                                                         make_engine, run,
                                                                         monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 8)  # restored afterwards
    model_dir = tiny_model_dir("qwen3")
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    requests = {f"r{n}": (list(range(3, 3 + n)), params) for n in (2, 5, 11)}
    eager = run(make_engine(model_dir, kv_block_size=4, num_kv_blocks=64), requests)
    compiled_engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=64, compile=True,
                                  recompile_limit=16)
    assert torch._dynamo.config.recompile_limit == 16
    compiled = run(compiled_engine, requests)
    assert {r: v["token_ids"] for r, v in compiled.items()} == {
        r: v["token_ids"] for r, v in eager.items()}
