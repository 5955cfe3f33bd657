"""Sampling parameters as a user sees them: seeds, penalties, stops, logprobs, validation."""

from __future__ import annotations

import msgspec
import pytest
import torch
from transformers import AutoModelForCausalLM

from mstar.engine.request.sampling_params import SamplingParams
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


def test_sampled_requests_give_the_same_tokens_in_serial_and_overlapped_loops(model_dir,
                                                                            make_engine, run, ids):
    """Seeded requests with top-k/top-p, penalties, logit_bias and min_tokens, more of them than
    slots (max_num_seqs=3), ending at different steps: the overlapped loop (wasted rows, slots
    freed and taken again) gives the serial loop's tokens."""
    p, other = ids
    jobs = {f"r{i}": (p if i % 2 else other, SamplingParams(
        temperature=0.9, top_p=0.9, top_k=50 if i % 3 == 0 else -1, seed=i, max_tokens=6 + 3 * i,
        ignore_eos=True, presence_penalty=0.4 * (i % 2), repetition_penalty=1.2 if i == 4 else 1,
        logit_bias={5: 2.0} if i == 2 else {}, min_tokens=2)) for i in range(7)}
    knobs = dict(kv_block_size=4, num_kv_blocks=256, max_num_seqs=3)
    serial = run(make_engine(model_dir, max_consecutive_spec_steps=0, **knobs), jobs)
    engine = make_engine(model_dir, max_consecutive_spec_steps=1024, **knobs)
    overlapped = run(engine, jobs)
    assert engine.loop.counters.continuations > 0
    assert {r: o["token_ids"] for r, o in overlapped.items()} == {
        r: o["token_ids"] for r, o in serial.items()}
    assert len({tuple(o["token_ids"][:6]) for o in serial.values()}) > 3


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


# ---- penalties, logit_bias, min_tokens: the sampler on hand-made logits ------------------------

EOS = 3
LOGITS = [3.0, 2.6, 2.0, 0.0, -50.0, -50.0]  # token 3 is EOS


def _sample(params: SamplingParams, outputs: list[int] = (), prompt: list[int] = (5,),
            logits: list[float] = LOGITS):
    """Sample one row after ``outputs`` were sampled before; (token, the batch, logprobs)."""
    from mstar.engine.sampling.batch import RowAdd, SamplingBatch
    from mstar.engine.sampling.sampler import Sampler, SamplingStep
    from mstar.engine.sampling.state import new_sampling_state

    vocab = len(logits)
    batch = SamplingBatch(1, vocab, torch.device("cpu"), seed=0)
    state = new_sampling_state(params, {EOS}, vocab, None)
    sampler = Sampler(batch)
    add = RowAdd(0, params, list(prompt), list(outputs), None, state)
    started = sampler.begin(SamplingStep([0], added=[add]))
    tokens, logprobs = sampler.sample(torch.tensor([logits]), started)
    return int(tokens[0]), batch, logprobs


@pytest.mark.parametrize(("presence", "frequency", "winner"), [
    (0.0, 0.0, 0),   # 3.0 vs 2.6 vs 2.0: the raw argmax
    (1.2, 0.0, 2),   # both seen tokens lose 1.2: 1.8, 1.4 vs 2.0
    (0.0, 0.45, 1),  # token 0 was output twice: 3.0 - 0.9 = 2.1 < 2.6 - 0.45 = 2.15
    (0.5, 0.3, 2),   # 3.0 - 0.5 - 0.6 = 1.9, 2.6 - 0.5 - 0.3 = 1.8 vs 2.0
    (-1.0, 0.0, 0),  # a negative presence penalty favours what was said
])
def test_presence_and_frequency_penalties_follow_openai(presence, frequency, winner):
    """logit -= presence * (count > 0) + frequency * count, counting the output (0, 0, 1) only:
    token 2 is in the prompt and is not penalised."""
    params = SamplingParams(temperature=0, presence_penalty=presence,
                            frequency_penalty=frequency)
    assert _sample(params, outputs=[0, 0, 1], prompt=[2])[0] == winner


def test_repetition_penalty_covers_the_prompt_too():
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    assert _sample(params, prompt=[0])[0] == 1  # 3.0 / 2 < 2.6
    assert _sample(params, outputs=[1], prompt=[0])[0] == 2  # and 2.6 / 2 < 2.0


def test_logit_bias_picks_or_bans_a_token():
    assert _sample(SamplingParams(temperature=0, logit_bias={2: 1.5}))[0] == 2
    assert _sample(SamplingParams(temperature=0, logit_bias={0: -100}))[0] == 1
    sampled = {_sample(SamplingParams(temperature=1.0, logit_bias={4: 100.0}))[0]
               for _ in range(5)}
    assert sampled == {4}  # a token far below the rest wins every draw once biased by 100


def test_min_tokens_keeps_eos_and_stop_ids_out():
    eos_first = [0.0, 0.0, 1.0, 5.0, -50.0, -50.0]  # EOS, then token 2 (a stop token id below)
    params = SamplingParams(temperature=0, min_tokens=2, stop_token_ids=[2])
    assert _sample(params, logits=eos_first)[0] == 0
    assert _sample(params, outputs=[1], logits=eos_first)[0] == 0
    assert _sample(params, outputs=[1, 1], logits=eos_first)[0] == EOS
    assert _sample(SamplingParams(temperature=0), logits=eos_first)[0] == EOS
    only_eos = [float("-inf")] * 3 + [5.0] + [float("-inf")] * 2  # a grammar that can only end
    assert _sample(params, logits=only_eos)[0] == EOS


def test_sampler_counts_each_sampled_token():
    params = SamplingParams(temperature=0, frequency_penalty=0.1)
    token, batch, _ = _sample(params, outputs=[1])
    assert token == 0 and batch.output_counts[0].tolist() == [1, 1, 0, 0, 0, 0]


def test_logprobs_come_from_the_raw_logits():
    """Bias and penalties change which token is picked, not the reported logprobs."""
    params = SamplingParams(temperature=0, logprobs=1, logit_bias={2: 10.0},
                            presence_penalty=2.0)
    token, _, logprobs = _sample(params, outputs=[2])
    raw = torch.log_softmax(torch.tensor(LOGITS), -1)
    assert token == 2 and logprobs[0].logprob == pytest.approx(float(raw[2]))
    assert logprobs[0].top == [(0, pytest.approx(float(raw[0])))]


# ---- the same on the engine ---------------------------------------------------------------------


def test_logit_bias_changes_the_greedy_first_token(engine, run, ids):
    p, _ = ids
    plain = _one(run, engine, p, temperature=0, max_tokens=3, ignore_eos=True)["token_ids"]
    other = (plain[0] + 7) % 300 + 3
    biased = _one(run, engine, p, temperature=0, max_tokens=3, ignore_eos=True,
                  logit_bias={other: 100.0})["token_ids"]
    banned = _one(run, engine, p, temperature=0, max_tokens=3, ignore_eos=True,
                  logit_bias={plain[0]: -100.0})["token_ids"]
    assert biased == [other] * 3
    assert banned[0] != plain[0]


def test_penalties_match_a_step_by_step_reference(engine, run, ids, model_dir):
    """presence/frequency penalties by the OpenAI formula, over the outputs only, each step on the
    full-sequence logits of transformers; the engine (overlapped loop) gives the same tokens."""
    p, _ = ids
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    seq, out = list(p), []
    for _ in range(16):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1]
        for token in set(out):
            logits[token] -= 0.8 + 0.6 * out.count(token)
        out.append(int(logits.argmax()))
        seq.append(out[-1])
    plain = _one(run, engine, p, temperature=0, max_tokens=16, ignore_eos=True)["token_ids"]
    penalised = _one(run, engine, p, temperature=0, max_tokens=16, ignore_eos=True,
                     presence_penalty=0.8, frequency_penalty=0.6)["token_ids"]
    assert penalised == out and out != plain


def test_min_tokens_delays_eos(engine, run, ids, monkeypatch):
    p, _ = ids
    full = _one(run, engine, p, temperature=0, max_tokens=12, ignore_eos=True)["token_ids"]
    monkeypatch.setattr(engine, "eos_token_ids", {full[1]})
    early = _one(run, engine, p, temperature=0, max_tokens=12)
    late = _one(run, engine, p, temperature=0, max_tokens=12, min_tokens=6)
    assert early["token_ids"] == full[:2] and early["finish_reason"] == "stop"
    assert len(late["token_ids"]) >= 6 and full[1] not in late["token_ids"][:6]


def test_logit_bias_for_an_unknown_token_is_rejected(engine, ids):
    from mstar.engine.request.errors import RequestRejected

    with pytest.raises(RequestRejected, match="logit_bias") as err:
        engine.add_request("bias", ids[0], SamplingParams(logit_bias={10**6: 1.0}))
    assert err.value.param == "logit_bias"
