"""Greedy outputs match transformers token for token, whatever the batching/caching path."""

from __future__ import annotations

import pytest

from mstar.engine.request.sampling_params import SamplingParams

FAMILIES = ("llama", "qwen2", "qwen3")
MAX_NEW = 20
TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany. "
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "def add(a, b):\n    return a + b\n",
    "Numbers: 0 1 2 3 4 5 6 7 8 9",
]


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompts, greedy_reference):
    """transformers greedy generate, each prompt alone, fp32."""
    return {family: greedy_reference(tiny_model_dir(family), prompts, MAX_NEW)
            for family in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_batched_greedy_matches_transformers(family, tiny_model_dir, make_engine, run, prompts,
                                             reference, device):
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=512)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    results = run(engine, {f"r{i}": (p, params) for i, p in enumerate(prompts)})
    assert [results[f"r{i}"]["token_ids"] for i in range(len(prompts))] == reference[family]
    assert all(r["finish_reason"] in ("stop", "length") for r in results.values())
    if device == "cpu":  # the native paged decode attention, else the decode mirror, served them
        backend = engine.model_runner.attn_backend
        assert backend.use_native or backend.mirror.buffers


def test_batched_greedy_through_the_decode_mirror(tiny_model_dir, make_engine, greedy, prompts,
                                                  reference, device):
    """The CPU decode path where the native kernels cannot run (no AVX2, no compiler)."""
    if device != "cpu":
        pytest.skip("the decode mirror is a CPU path")
    # Enough cache for the decode mirror (dense K/V reused across steps) to kick in.
    engine = make_engine(tiny_model_dir("llama"), kv_block_size=4, num_kv_blocks=512)
    engine.model_runner.attn_backend.use_native = False
    assert greedy(engine, prompts, MAX_NEW) == reference["llama"]
    assert engine.model_runner.attn_backend.mirror.buffers


@pytest.mark.parametrize("family", FAMILIES)
def test_single_request_unchanged_by_batch(family, tiny_model_dir, make_engine, run, prompts,
                                           reference):
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=128)
    for i in (0, 2):
        alone = run(engine, {"r0": (prompts[i], SamplingParams(temperature=0, max_tokens=MAX_NEW))})
        assert alone["r0"]["token_ids"] == reference[family][i]


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_matches(family, tiny_model_dir, make_engine, greedy, prompts, reference):
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=128,
                         max_num_batched_tokens=7)
    results = greedy(engine, prompts, MAX_NEW)
    assert results == reference[family]


@pytest.mark.parametrize("family", FAMILIES)
def test_preemption_keeps_outputs(family, tiny_model_dir, make_engine, greedy, prompts, reference):
    # 24 blocks of 4 tokens cannot hold all five requests at full length at once.
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=24,
                         enable_prefix_caching=False)
    results = greedy(engine, prompts, MAX_NEW)
    assert engine.scheduler.num_preemptions > 0
    assert results == reference[family]
    assert engine.stats().free_blocks == 24


@pytest.mark.parametrize("family", FAMILIES)
def test_prefix_cache_hits_keep_outputs(family, tiny_model_dir, make_engine, run, greedy, prompts,
                                        reference, tiny_tokenizer):
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=512)
    first = greedy(engine, prompts, MAX_NEW)
    second = greedy(engine, prompts, MAX_NEW)
    assert first == second == reference[family]
    # A new prompt sharing a 20-token prefix with prompt 2 reuses its blocks (4 of 4 tokens)
    # and still matches an engine without prefix caching.
    shared = prompts[2][:20] + tiny_tokenizer.encode(" Hello world!")
    probe = run(engine, {"probe": (shared, SamplingParams(temperature=0, max_tokens=MAX_NEW))})
    assert probe["probe"]["cached_tokens"] == 20
    fresh = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=128,
                        enable_prefix_caching=False)
    expect = run(fresh, {"probe": (shared, SamplingParams(temperature=0, max_tokens=MAX_NEW))})
    assert probe["probe"]["token_ids"] == expect["probe"]["token_ids"]


@pytest.mark.parametrize("family", ["llama"])
def test_staggered_arrivals_keep_outputs(family, tiny_model_dir, make_engine, prompts, reference):
    """Requests joining and leaving mid-decode (batch composition changes every few steps)."""
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=512)
    got = {i: [] for i in range(len(prompts))}
    pending = list(enumerate(prompts))
    step = 0
    while pending or engine.has_unfinished_requests():
        if pending and step % 3 == 0:
            i, p = pending.pop(0)
            engine.add_request(str(i), p, SamplingParams(temperature=0, max_tokens=MAX_NEW - i))
        for out in engine.step():
            got[int(out.request_id)] += out.new_token_ids
        step += 1
    for i in range(len(prompts)):
        assert got[i] == reference[family][i][: MAX_NEW - i]


@pytest.mark.parametrize("family", ["qwen3"])
def test_continuation_planned_ahead_keeps_outputs(family, tiny_model_dir, make_engine, prompts,
                                                 reference):
    """The overlap pattern by hand: step N+1 is planned before step N runs, fed N's tokens."""
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=512,
                         max_consecutive_spec_steps=1024)
    runner, scheduler = engine.model_runner, engine.scheduler
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, SamplingParams(temperature=0, max_tokens=MAX_NEW))
    got = {i: [] for i in range(len(prompts))}
    step = scheduler.schedule()
    continued = 0
    while True:
        following = scheduler.schedule(after=step)  # planned before ``step`` runs
        result = runner.execute(step)
        for out in engine.postprocess(step, result):
            got[int(out.request_id)] += out.new_token_ids
        if following is not None:
            result = runner.execute(following)  # rows of requests finished meanwhile are wasted
            for out in engine.postprocess(following, result):
                got[int(out.request_id)] += out.new_token_ids
            continued += 1
        if not engine.has_unfinished_requests():
            break
        step = scheduler.schedule()
    assert continued > 5
    assert [got[i] for i in range(len(prompts))] == reference[family]
    assert engine.stats().free_blocks == 512


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_offline_llm_overlapped_equals_serial(family, tiny_model_dir, prompts, reference):
    """mstar.LLM runs the same step loop as a worker: overlapped and serial give the same tokens."""
    from mstar import LLM

    params = SamplingParams(temperature=0, max_tokens=MAX_NEW)
    results = {}
    for cap in (0, 1024):
        llm = LLM(str(tiny_model_dir(family)), device="cpu", dtype="float32", kv_block_size=4,
                  num_kv_blocks=64, max_consecutive_spec_steps=cap)
        results[cap] = [r.token_ids for r in llm.generate(
            [{"prompt_token_ids": p} for p in prompts], params)]
        counters = llm.engine.loop.counters
        assert (counters.continuations > 0) == bool(cap)
        assert llm.engine.stats().free_blocks == 64
    assert results[0] == results[1024] == reference[family]
