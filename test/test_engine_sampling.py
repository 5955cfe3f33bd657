"""Sampling parameters as a user sees them: seeds, penalties, stops, logprobs, validation."""

from __future__ import annotations

import msgspec
import pytest
import torch
from transformers import AutoModelForCausalLM

from mstar.engine.sampling_params import SamplingParams
from mstar.ipc import messages as m

PROMPT = "The quick brown fox"
OTHER = "Paris is the capital of France, and Berlin"


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("llama")


@pytest.fixture(scope="module")
def engine(model_dir, make_engine):
    return make_engine(model_dir, kv_block_size=4, num_kv_blocks=256)


@pytest.fixture(scope="module")
def ids(tiny_tokenizer):
    return tiny_tokenizer.encode(PROMPT), tiny_tokenizer.encode(OTHER)


def _one(run, engine, prompt, **kw):
    return run(engine, {"x": (prompt, SamplingParams(**kw))})["x"]


def test_seeded_sampling_reproducible_and_batch_independent(engine, run, ids):
    p, other = ids
    params = SamplingParams(temperature=0.9, top_p=0.95, top_k=100, seed=7, max_tokens=24,
                            ignore_eos=True)
    alone = run(engine, {"a": (p, params)})["a"]["token_ids"]
    batch = run(engine, {
        "noise1": (other, SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True)),
        "a": (p, params),
        "noise2": (p, SamplingParams(temperature=1.2, seed=99, max_tokens=5, ignore_eos=True)),
    })
    assert batch["a"]["token_ids"] == alone
    other_seed = run(engine, {"a": (p, SamplingParams(temperature=0.9, top_p=0.95, top_k=100,
                                                        seed=8, max_tokens=24,
                                                        ignore_eos=True))})
    assert other_seed["a"]["token_ids"] != alone


def test_top_k_one_and_min_p_one_are_greedy(engine, run, ids):
    p, _ = ids
    greedy = _one(run, engine, p, temperature=0, max_tokens=12, ignore_eos=True)["token_ids"]
    top_k = _one(run, engine, p, temperature=1.5, top_k=1, seed=1, max_tokens=12,
                 ignore_eos=True)
    min_p = _one(run, engine, p, temperature=1.5, min_p=1.0, seed=1, max_tokens=12,
                 ignore_eos=True)
    tiny_top_p = _one(run, engine, p, temperature=1.5, top_p=1e-6, seed=1, max_tokens=12,
                      ignore_eos=True)
    assert top_k["token_ids"] == min_p["token_ids"] == tiny_top_p["token_ids"] == greedy


def test_repetition_penalty_matches_transformers(engine, run, ids, model_dir):
    p, _ = ids
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=int),
                             do_sample=False, max_new_tokens=16, repetition_penalty=1.5,
                             pad_token_id=0)[0, len(p):].tolist()
    plain = _one(run, engine, p, temperature=0, max_tokens=16)["token_ids"]
    penalised = _one(run, engine, p, temperature=0, max_tokens=16, repetition_penalty=1.5)
    assert penalised["token_ids"] == ref
    assert ref != plain


def test_stop_string_is_excluded_from_text(engine, run, ids):
    p, _ = ids
    full = _one(run, engine, p, temperature=0, max_tokens=30, ignore_eos=True)["text"]
    stop = full[8:11]
    cut = _one(run, engine, p, temperature=0, max_tokens=30, ignore_eos=True, stop=[stop])
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == full[: full.find(stop)]
    assert stop not in cut["text"]


def test_stop_token_ids_and_max_tokens(engine, run, ids):
    p, _ = ids
    full = _one(run, engine, p, temperature=0, max_tokens=20, ignore_eos=True)
    assert full["finish_reason"] == "length" and len(full["token_ids"]) == 20
    target = full["token_ids"][5]
    cut = _one(run, engine, p, temperature=0, max_tokens=20, stop_token_ids=[target])
    k = full["token_ids"].index(target)
    assert cut["token_ids"] == full["token_ids"][: k + 1]
    assert cut["finish_reason"] == "stop"


def test_eos_stops_unless_ignored(engine, run, ids, monkeypatch):
    p, _ = ids
    full = _one(run, engine, p, temperature=0, max_tokens=12, ignore_eos=True)["token_ids"]
    monkeypatch.setattr(engine, "eos_token_ids", {full[3]})
    k = full.index(full[3])
    stopped = _one(run, engine, p, temperature=0, max_tokens=12)
    assert stopped["token_ids"] == full[: k + 1] and stopped["finish_reason"] == "stop"
    ignored = _one(run, engine, p, temperature=0, max_tokens=12, ignore_eos=True)
    assert ignored["token_ids"] == full and ignored["finish_reason"] == "length"


def test_logprobs_reported_per_token(engine, ids):
    p, _ = ids
    engine.add_request("lp", p, SamplingParams(temperature=0, max_tokens=4, logprobs=3,
                                               ignore_eos=True))
    entries = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            entries += out.logprobs
            assert out.new_token_ids == [e.token_id for e in out.logprobs]
    assert len(entries) == 4
    for e in entries:
        assert len(e.top) == 3
        assert e.top[0][0] == e.token_id  # greedy picks the most likely token
        assert e.logprob == pytest.approx(e.top[0][1]) and e.logprob <= 0


@pytest.mark.parametrize(
    ("name", "value"),
    [("max_tokens", 0), ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -2),
     ("min_p", 1.5), ("repetition_penalty", 0.0), ("logprobs", 21), ("stop", [""]),
     ("stop_token_ids", [-1]), ("seed", "x"), ("max_tokens", 2.5)],
)
def test_invalid_params_name_the_parameter(name, value):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**{name: value})


def test_params_round_trip_and_top_k_zero_disables():
    p = SamplingParams(temperature=0.5, stop="END", top_k=0, seed=3)
    assert p.stop == ["END"] and p.top_k == -1
    assert m.decode(m.encode(m.AddRequest("r", [1], p))).params == p


def test_params_decoded_off_the_wire_are_validated():
    bad = m.encode(m.AddRequest("r", [1], SamplingParams(top_p=0.5)))
    bad = bad.replace(msgspec.msgpack.encode(0.5), msgspec.msgpack.encode(1.5))
    with pytest.raises(msgspec.ValidationError, match="top_p"):
        m.decode(bad)
