"""A long prompt shares the worker (MSTAR_MAX_PREFILL_CHUNK_TOKENS): it is prefilled in chunks of
at most the cap, generation and pooling prompts alike, so a short request sent after it is
admitted and decodes between its chunks instead of waiting for its whole prompt; and what the
long request gets is what it gets in one step."""

from __future__ import annotations

import numpy as np
import pytest

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector
from mstar.engine.schedule.prefill_chunk import prefill_cap
from mstar.settings.knobs.engine import PREFILL_CHUNK_ON_CPU

LONG = 200  # prompt tokens of the long request
CAP = 16


def _steps(engine, requests: dict) -> tuple[dict, list[str]]:
    """Add ``requests`` in order and step to the end: each one's outputs joined, and the ids in
    the order they finished."""
    for rid, (prompt, params) in requests.items():
        engine.add_request(rid, prompt, params)
    got = {rid: {"tokens": [], "embedding": None} for rid in requests}
    finished = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.request_id]["tokens"] += out.new_token_ids
            if out.finished:
                got[out.request_id]["embedding"] = out.embedding
                finished.append(out.request_id)
    return got, finished


@pytest.mark.parametrize("long_params", [SamplingParams(pooling="mean"),
                                         SamplingParams(pooling="last"),
                                         SamplingParams(temperature=0.0, max_tokens=4)],
                         ids=["mean", "last", "generation"])
def test_a_long_prompt_shares_the_steps_and_gets_what_it_gets_in_one(long_params, tiny_model_dir,
                                                                     make_engine, tiny_tokenizer):
    model_dir = tiny_model_dir("llama")
    text = " ".join(f"line {i}: the quick brown fox jumps over the lazy dog." for i in range(40))
    long = tiny_tokenizer.encode(text)[:LONG]
    assert len(long) == LONG
    short = SamplingParams(temperature=0.0, max_tokens=4)
    requests = {"long": (long, long_params), "short": (tiny_tokenizer.encode("Hello"), short)}
    settings = {"kv_block_size": 4, "num_kv_blocks": 256, "enable_prefix_caching": False}
    whole, order = _steps(make_engine(model_dir, max_prefill_chunk_tokens=LONG, **settings),
                          requests)
    assert order == ["long", "short"]  # uncapped: the long prompt holds the first step whole
    engine = make_engine(model_dir, max_prefill_chunk_tokens=CAP, **settings)
    chunked, order = _steps(engine, requests)
    assert order == ["short", "long"]  # the short request ran between the long one's chunks
    assert chunked["short"]["tokens"] == whole["short"]["tokens"]
    assert chunked["long"]["tokens"] == whole["long"]["tokens"]
    if long_params.pooling is not None:
        got, want = (bytes_vector(r["long"]["embedding"]) for r in (chunked, whole))
        assert np.abs(got - want).max() < 1e-4
    assert engine.stats().free_blocks == 256


def test_auto_caps_prefill_chunks_on_cpu_only():
    assert prefill_cap("auto", "cpu", 8192) == PREFILL_CHUNK_ON_CPU
    assert prefill_cap("auto", "cuda", 8192) == 8192
    assert prefill_cap(64, "cuda", 8192) == 64
