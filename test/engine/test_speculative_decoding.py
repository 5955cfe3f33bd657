"""Speculative decoding (``MSTAR_SPECULATIVE_METHOD=ngram``): the output is what it is without
speculation, token for token (greedy), whatever the batch, the cache size or the family; drafts
get accepted on repeating text; seeded sampling is reproducible; the acceptance floor stops it.

Not the overlapped loop's "speculative step" (test_worker_loop.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.speculative.ngram import NgramIndex
from mstar.engine.speculative.speculation import Speculation
from mstar.engine.speculative.verify import accept

# speculative_gate=False: every proposed draft is verified, whatever this machine's step timings
# (the gate itself: test_speculative_gate.py).
FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3", "phi3_longrope", "olmo2",
            "smollm3", "qwen3_moe")  # and qwen3_5: test_hybrid_model_rolls_back_its_state
MAX_NEW = 24
TEXTS = [
    "one two three four five six seven. one two three four five six seven. one two three",
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany. "
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Hello",
]
NGRAM = {"speculative_method": "ngram", "speculative_gate": False, "num_speculative_tokens": 4,
         "speculative_min_acceptance": 0.0}


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


def _requests(prompts, **params) -> dict:
    params.setdefault("temperature", 0.0)
    params.setdefault("max_tokens", MAX_NEW)
    return {f"r{i}": (p, SamplingParams(**params)) for i, p in enumerate(prompts)}


def _tokens(results) -> dict:
    return {rid: r["token_ids"] for rid, r in results.items()}


def _both(make_engine, run, model_dir, requests, **settings) -> tuple[dict, dict, object]:
    """(results without speculation, with it, the speculating engine)."""
    plain = run(make_engine(model_dir, **settings), requests)
    engine = make_engine(model_dir, **settings, **NGRAM)
    return plain, run(engine, requests), engine


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_output_is_identical_and_drafts_are_accepted(family, tiny_model_dir, make_engine,
                                                           run, prompts):
    plain, spec, engine = _both(make_engine, run, tiny_model_dir(family), _requests(prompts),
                                kv_block_size=4, num_kv_blocks=256)
    assert _tokens(spec) == _tokens(plain)
    assert engine.speculation.stats.accepted > 0
    assert engine.stats().free_blocks == 256


@pytest.mark.parametrize("quantization", ["q4", "int8"])
def test_verify_steps_run_the_one_call_decoder_stack(quantization, tiny_model_dir, make_engine,
                                                     run, prompts, monkeypatch):
    """With native linears, a verify step's rows (the last token and its drafts) attend as
    decode rows, so the step runs the whole decoder stack in one call, and the output is still
    what it is without speculation. One request: its verify steps (5 rows) stay under the
    quantized kernels' wide path (from 6 rows for int8 on AMX), which rounds x to bf16 where the
    integer dot rounds it to int16, so a batch of verify rows over the crossover may round
    otherwise than the plain decode rows do (docs/engine.rst, "Quantized weights at wide batches
    on AMX")."""
    import torch

    from mstar.models.families import llama

    stacked = []
    original = llama.decode_layers

    def counted(stack, hidden, cos, sin, attn_metadata):
        stacked.append(hidden.shape[0] - attn_metadata.num_decodes)  # verify rows' tokens
        return original(stack, hidden, cos, sin, attn_metadata)

    monkeypatch.setattr(llama, "decode_layers", counted)
    plain, spec, engine = _both(make_engine, run, tiny_model_dir("llama"), _requests(prompts[:1]),
                                quantization=quantization, num_kv_blocks=256)
    assert NGRAM["num_speculative_tokens"] + 1 < torch.ops.mstar_cpu.quant_wide_rows(quantization == "q4")
    assert _tokens(spec) == _tokens(plain)
    assert engine.speculation.stats.accepted > 0
    assert any(stacked)  # steps that verified drafts ran the stack


def _oracle(engine, truth: dict, k: int):
    """A proposer that knows the plain output: the next ``k`` tokens, the third one wrong on
    every other step (two accepted, the rest rejected), all right otherwise."""
    def propose(seq):
        done = seq.num_output_tokens
        drafts = list(truth[seq.request_id][done:done + min(k, seq.params.max_tokens - done - 1)])
        if done % 2 and len(drafts) > 2:
            drafts[2] = (drafts[2] + 1) % 300
        return tuple(drafts)
    return propose


def test_hybrid_model_rolls_back_its_state_after_rejections(tiny_model_dir, make_engine, run,
                                                           prompts):
    """Qwen3.5: a row that rejects drafts gets its recurrent state back and recomputes; the
    output is what it is without speculation, batched beside plain decodes, for drafts that
    match in full, in part (a rollback) and not at all (the n-gram proposer on random text)."""
    model_dir = tiny_model_dir("qwen3_5")
    requests = _requests(prompts) | {"long": (prompts[2], SamplingParams(temperature=0.0,
                                                                          max_tokens=40))}
    plain, spec, engine = _both(make_engine, run, model_dir, requests, kv_block_size=4,
                                num_kv_blocks=256)
    assert engine.speculation.recompute_rejected
    assert _tokens(spec) == _tokens(plain)
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=256, **NGRAM)
    engine.speculation.propose = _oracle(engine, _tokens(plain), k=4)
    assert _tokens(run(engine, requests)) == _tokens(plain)
    stats = engine.speculation.stats
    assert stats.accepted > 0 and stats.proposed > stats.accepted  # some drafts were rejected


def test_batch_mixing_penalties_min_tokens_and_plain_requests(tiny_model_dir, make_engine, run,
                                                              prompts):
    """Penalised and min_tokens requests speculate beside plain ones (each verified position
    counts the drafts before it); stop tokens, max_tokens and logprobs inside an accepted run
    come out as without speculation."""
    model_dir = tiny_model_dir("llama")
    greedy = _requests(prompts)
    stop_at = run(make_engine(model_dir), {"r0": greedy["r0"]})["r0"]["token_ids"][9]
    requests = {
        **greedy,
        "pen": (prompts[0], SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                           repetition_penalty=1.3, frequency_penalty=0.5)),
        "min": (prompts[0], SamplingParams(temperature=0.0, max_tokens=MAX_NEW, min_tokens=5)),
        "stop": (prompts[0], SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                            stop_token_ids=[stop_at])),
        "short": (prompts[0], SamplingParams(temperature=0.0, max_tokens=7)),
        "lp": (prompts[0], SamplingParams(temperature=0.0, max_tokens=MAX_NEW, logprobs=2)),
        "bias": (prompts[1], SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                            logit_bias={stop_at: 3.0})),
    }
    plain, spec, engine = _both(make_engine, run, model_dir, requests, kv_block_size=4,
                                num_kv_blocks=256)
    assert _tokens(spec) == _tokens(plain)
    assert len(spec["short"]["token_ids"]) == 7 and spec["short"]["finish_reason"] == "length"
    assert spec["stop"]["token_ids"][-1] == stop_at and spec["stop"]["finish_reason"] == "stop"
    stats = engine.speculation.stats
    assert stats.accepted > 0 and stats.proposed > stats.accepted  # some drafts were rejected


def test_logprobs_of_accepted_tokens(tiny_model_dir, make_engine, prompts):
    model_dir = tiny_model_dir("llama")
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW, logprobs=2)

    def logprobs(**settings):
        engine = make_engine(model_dir, **settings)
        engine.add_request("a", prompts[0], params)
        out = []
        while engine.has_unfinished_requests():
            for o in engine.step():
                assert len(o.logprobs) == len(o.new_token_ids)
                out += o.logprobs
        return engine, out

    _, plain = logprobs()
    engine, spec = logprobs(**NGRAM)
    assert engine.speculation.stats.accepted > 0
    assert [lp.token_id for lp in spec] == [lp.token_id for lp in plain]
    assert [lp.logprob for lp in spec] == pytest.approx([lp.logprob for lp in plain], abs=1e-4)
    assert [[t for t, _ in lp.top] for lp in spec] == [[t for t, _ in lp.top] for lp in plain]


def test_preemption_and_prefix_caching_under_a_small_cache(tiny_model_dir, make_engine, run,
                                                           prompts):
    """Drafts grow a row's blocks; a rejected draft's K/V is never reused (prefix cache) and a
    preempted speculating request resumes to the same tokens."""
    model_dir = tiny_model_dir("qwen3")
    requests = _requests(prompts + prompts[:2])  # repeated prompts: prefix-cache hits
    plain, spec, engine = _both(make_engine, run, model_dir, requests, kv_block_size=4,
                                num_kv_blocks=28)
    assert engine.scheduler.num_preemptions > 0
    assert engine.speculation.stats.accepted > 0
    assert _tokens(spec) == _tokens(plain)
    assert engine.stats().free_blocks == 28


def test_seeded_sampling_is_reproducible(tiny_model_dir, make_engine, run, prompts):
    model_dir = tiny_model_dir("llama")
    requests = _requests(prompts, temperature=0.3, top_p=0.9, seed=7)
    first = run(make_engine(model_dir, **NGRAM), requests)
    engine = make_engine(model_dir, **NGRAM)
    assert _tokens(run(engine, requests)) == _tokens(first)
    assert engine.speculation.stats.proposed > 0


def test_overlap_cap_turns_speculation_off(tiny_model_dir, make_engine):
    engine = make_engine(tiny_model_dir("llama"), max_consecutive_spec_steps=4, **NGRAM)
    assert engine.speculation is None and engine.loop.policy.overlapped
    with pytest.raises(ValueError, match="no MTP layers"):
        make_engine(tiny_model_dir("llama"), speculative_method="mtp", config_strictness="strict")


class _Seq:
    seq_no = 0
    num_output_tokens = 0
    params = SamplingParams(temperature=0.0, max_tokens=100)

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids


def test_acceptance_floor_stops_a_request():
    spec = Speculation("ngram", num_tokens=2, min_n=1, max_n=2, min_acceptance=0.5)
    seq = _Seq([1, 2, 3, 1, 2, 3, 1, 2])
    assert spec.propose(seq) == (3, 1)
    for _ in range(3):
        spec.record(0, proposed=2, accepted=1)  # 50%: still on
    assert spec.propose(seq) == (3, 1)
    spec.record(0, proposed=2, accepted=0)  # 3 of 8 < 50%
    assert spec.propose(seq) == () and spec.stats.stopped == 1


def test_misses_shorten_the_drafts_and_pause_proposals():
    """Open-ended text: a request whose drafts fail verifies fewer and fewer of them."""
    spec = Speculation("ngram", num_tokens=4, min_n=1, max_n=2, min_acceptance=0.0)
    seq = _Seq([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1])
    assert spec.propose(seq) == (2, 3, 4, 5)
    spec.record(0, proposed=4, accepted=0)  # a miss: one step without drafts, then one draft
    assert [spec.propose(seq) for _ in range(2)] == [(), (2,)]
    spec.record(0, proposed=1, accepted=0)  # two misses in a row: three steps
    assert [spec.propose(seq) for _ in range(4)] == [(), (), (), (2,)]
    spec.record(0, proposed=1, accepted=1)  # all accepted: the pause ends, the length doubles
    assert spec.propose(seq) == (2, 3)
    spec.record(0, proposed=2, accepted=1)  # one accepted: two next
    assert spec.propose(seq) == (2, 3)


def _scan(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """The reference: scan back for the latest earlier occurrence of the longest suffix."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == tokens[len(tokens) - n:]:
                return tokens[start + n:start + n + k]
    return []


@given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 40), max_size=5),
       st.integers(1, 3), st.integers(0, 2), st.integers(1, 5))
def test_ngram_index_finds_what_a_scan_finds(tokens, cuts, min_n, extra, k):
    """Proposing as the tokens grow (cuts: the lengths at earlier proposals) gives, each time,
    the continuation of the latest earlier occurrence of the longest matching suffix."""
    index = NgramIndex(min_n, min_n + extra)
    for cut in [*sorted(c for c in cuts if c <= len(tokens)), len(tokens)]:
        assert index.propose(tokens[:cut], k) == _scan(tokens[:cut], min_n, min_n + extra, k)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=6), st.data())
def test_accept_is_the_matching_prefix(sampled, data):
    drafts = data.draw(st.lists(st.integers(0, 3), min_size=len(sampled) - 1,
                                max_size=len(sampled) - 1))
    a = accept(drafts, sampled)
    assert drafts[:a] == sampled[:a]
    assert a == len(drafts) or drafts[a] != sampled[a]


def test_metrics_show_proposed_accepted_and_phase_seconds(tiny_model_dir, make_engine, run,
                                                          prompts):
    from mstar.api_server.context.metrics import Metrics
    from mstar.ipc.messages import WorkerStats

    engine = make_engine(tiny_model_dir("llama"), **NGRAM)
    run(engine, _requests(prompts[:1]))
    s = engine.stats()
    accepted = s.spec_accepted
    assert s.spec_method == "ngram" and s.spec_proposed >= accepted > 0 and s.spec_verify_s > 0
    metrics = Metrics()
    metrics.update_workers({0: WorkerStats(0, 0, 0, 0.0, 0, 0, 0, 0.0, s.spec_method,
                                           s.spec_proposed, accepted, s.spec_propose_s,
                                           s.spec_verify_s)})
    text = metrics.render().decode()
    assert f'mstar_spec_decode_accepted_tokens{{method="ngram"}} {float(accepted)}' in text
    assert 'mstar_spec_decode_seconds{method="ngram",phase="verify"}' in text
