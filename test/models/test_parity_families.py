"""Families beyond Llama/Qwen: greedy outputs match transformers (fp32) token for token,
whatever the batching, chunking, preemption or step overlap."""

from __future__ import annotations

import pytest

from mstar.engine.request.sampling_params import SamplingParams

FAMILIES = ("mistral", "gemma3", "phi3", "olmo2", "smollm3", "qwen3_moe", "qwen3_5")
MAX_NEW = 24
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany. "
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Hello",
]


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


@pytest.fixture(scope="module")
def reference(tiny_model_dir, prompts, greedy_reference):
    """Factory: transformers' greedy tokens per family, each prompt alone (cached)."""
    refs: dict[str, list[list[int]]] = {}

    def get(family: str) -> list[list[int]]:
        if family not in refs:
            refs[family] = greedy_reference(tiny_model_dir(family), prompts, MAX_NEW)
        return refs[family]

    return get


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_of_different_lengths_matches(family, tiny_model_dir, make_engine, greedy, prompts,
                                            reference, device):
    """Covers each prompt's 24 greedy tokens too: the reference ran every prompt alone."""
    # Enough cache for the CPU decode mirror (dense K/V reused across steps) to kick in.
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=512)
    results = greedy(engine, prompts, MAX_NEW)
    assert results == reference(family)
    if device == "cpu":  # the native paged decode attention (else the decode mirror) served the
        backend = engine.model_runner.attn_backend  # decodes, windows included
        assert backend.use_native or backend.mirror.buffers


@pytest.mark.parametrize("family", FAMILIES)
def test_chunked_prefill_matches(family, tiny_model_dir, make_engine, greedy, prompts, reference):
    # 7-token chunks: every prompt but the last is split inside, across several chunks (for
    # Qwen3.5 inside one 64-token DeltaNet chunk: the recurrent state is carried across).
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=128,
                         max_num_batched_tokens=7)
    assert len(prompts[0]) > 7
    results = greedy(engine, prompts, MAX_NEW)
    assert results == reference(family)


@pytest.mark.parametrize("family", FAMILIES)
def test_preemption_and_resume_match(family, tiny_model_dir, make_engine, greedy, prompts,
                                     reference):
    # 20 blocks of 4 tokens hold the longest request alone (18 blocks), not all at once.
    engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=20,
                         enable_prefix_caching=False)
    results = greedy(engine, prompts, MAX_NEW)
    assert engine.scheduler.num_preemptions > 0
    assert results == reference(family)
    assert engine.stats().free_blocks == 20
    _assert_all_state_slots_free(engine)


def _assert_all_state_slots_free(engine) -> None:
    slots = engine.block_manager.state_slots  # hybrid models only
    if slots is not None:
        assert sorted(slots.free) == list(range(slots.num_slots))


@pytest.mark.parametrize("family", FAMILIES)
def test_overlapped_loop_on_and_off_match(family, tiny_model_dir, make_engine, greedy, prompts,
                                          reference):
    for cap in (0, 1024):  # max_consecutive_spec_steps=0: the serial loop
        engine = make_engine(tiny_model_dir(family), kv_block_size=4, num_kv_blocks=128,
                             max_consecutive_spec_steps=cap)
        results = greedy(engine, prompts, MAX_NEW)
        assert results == reference(family)
        assert (engine.loop.counters.continuations > 0) == bool(cap)


@pytest.mark.parametrize("chunking", [{}, {"max_num_batched_tokens": 7}])
def test_phi3_longrope_matches(chunking, tiny_model_dir, make_engine, greedy, prompts, reference):
    """Sequences within original_max_position_embeddings: short factors and the attention factor
    (past it mstar and transformers differ by design, see LongRopeEmbedding)."""
    engine = make_engine(tiny_model_dir("phi3_longrope"), kv_block_size=4, num_kv_blocks=128,
                         **chunking)
    results = greedy(engine, prompts, MAX_NEW)
    assert results == reference("phi3_longrope")


def test_hybrid_model_state_slots_follow_the_sequences(tiny_model_dir, make_engine, run, greedy, prompts,
                                                       reference, greedy_reference):
    """Qwen3.5: prefix caching is off (test_serve_hybrid checks the logged reason); slots are
    taken at admission and freed on abort; with fewer slots than sequences, admission waits."""
    engine = make_engine(tiny_model_dir("qwen3_5"), kv_block_size=4, num_kv_blocks=128,
                         max_num_seqs=2, enable_prefix_caching=True)
    assert not engine.block_manager.enable_prefix_caching
    assert engine.block_manager.state_slots.num_slots == 2
    engine.add_request("gone", prompts[0], SamplingParams(temperature=0, max_tokens=MAX_NEW))
    engine.step()
    engine.abort_request("gone")
    while engine.has_unfinished_requests():
        engine.step()
    _assert_all_state_slots_free(engine)
    # A one-token prompt runs as a decode row in the slot the aborted request left dirty.
    one = [prompts[0][0]]
    alone = run(engine, {"one": (one, SamplingParams(temperature=0, max_tokens=MAX_NEW))})
    assert alone["one"]["token_ids"] == greedy_reference(tiny_model_dir("qwen3_5"), [one],
                                                         MAX_NEW)[0]
    engine.block_manager.state_slots.take()  # one slot left for three requests: one at a time
    results = greedy(engine, prompts, MAX_NEW)
    assert results == reference("qwen3_5")
    assert len(engine.block_manager.state_slots.free) == 1
