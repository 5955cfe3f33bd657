"""The batched sampler against the per-row reference it replaced (``main``'s sampler.py and
logit_adjustments.py, restated below): the same kept tokens, the same distribution, the same
adjusted logits; seeded rows independent of their batch mates; full-vocabulary logit_bias cheap."""

from __future__ import annotations

import time

import hypothesis
import pytest
import torch
from hypothesis import strategies as st

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.sampling.adjustments import apply_logit_bias, apply_penalties, block_early_stop
from mstar.engine.sampling.batch import RowAdd, SamplingBatch
from mstar.engine.sampling.draw import _from_candidates, draw, kept_candidates
from mstar.engine.sampling.nucleus import nucleus
from mstar.engine.sampling.sampler import Sampler, SamplingStep
from mstar.engine.sampling.state import new_sampling_state

CPU = torch.device("cpu")
EOS = 2

# ---- the per-row reference ---------------------------------------------------------------------


def reference_probs(x: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The old sampler's row: the (unnormalised) probabilities its exponential race drew from."""
    x = x / p.temperature
    if 0 < p.top_k < x.numel():
        kth = torch.topk(x, p.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = torch.softmax(x, dim=-1)
    if p.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        drop = (sorted_probs.cumsum(0) - sorted_probs) >= p.top_p
        probs = probs.scatter(0, order, sorted_probs.masked_fill(drop, 0.0))
    if p.min_p > 0.0:
        probs = probs.masked_fill(probs < p.min_p * probs.max(), 0.0)
    return probs


def reference_adjust(x: torch.Tensor, p: SamplingParams, prompt: list[int], outputs: list[int],
                     early_stop: list[int]) -> torch.Tensor:
    """The old per-row penalties, logit_bias and min_tokens on one row."""
    x = x.clone()
    counts = torch.zeros_like(x)
    for t in outputs:
        counts[t] += 1
    if p.repetition_penalty != 1.0:
        seen = counts > 0
        seen[prompt] = True
        x = torch.where(seen, torch.where(x > 0, x / p.repetition_penalty,
                                          x * p.repetition_penalty), x)
    x = x - p.presence_penalty * (counts > 0) - p.frequency_penalty * counts
    for token, value in p.logit_bias.items():
        x[token] += value
    if p.min_tokens and len(outputs) < p.min_tokens:
        blocked = x.clone()
        blocked[early_stop] = float("-inf")
        if torch.isfinite(blocked).any():
            x = blocked
    return x


# ---- strategies ---------------------------------------------------------------------------------

VOCAB = 97


@st.composite
def truncation(draw_, vocab: int = VOCAB) -> SamplingParams:
    return SamplingParams(
        temperature=draw_(st.sampled_from([0.3, 0.8, 1.0, 1.7])),
        top_k=draw_(st.sampled_from([-1, 1, 2, 5, 40, vocab - 1, vocab])),
        top_p=draw_(st.sampled_from([1.0, 0.999, 0.95, 0.6, 0.1, 1e-6])),
        min_p=draw_(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0])))


def random_logits(seed: int, rows: int, vocab: int = VOCAB, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * scale


def columns(params: list[SamplingParams], vocab: int) -> tuple[torch.Tensor, ...]:
    def col(values, dtype=torch.float32):
        return torch.tensor(values, dtype=dtype)

    return (col([p.temperature for p in params]),
            col([p.top_k if 0 < p.top_k < vocab else vocab for p in params], torch.int64),
            col([p.top_p for p in params]), col([p.min_p for p in params]))


def batched_support(x: torch.Tensor, params: list[SamplingParams]) -> list[set[int]]:
    """The tokens the batched sampler keeps per row: every token some uniform can pick."""
    vocab = x.shape[1]
    temperature, top_k, top_p, min_p = columns(params, vocab)
    out = []
    for i in range(x.shape[0]):
        one = slice(i, i + 1)
        row = x[one] / temperature[i]
        nuc = nucleus(row, top_p[one], min_p[one])
        if top_k[i] == vocab and top_p[i] < 1.0 and bool(nuc.fits[0]):
            out.append(set(nuc.kept_ids(0)))
        elif top_k[i] < vocab or top_p[i] < 1.0:
            ids, _, kept, _ = kept_candidates(row, top_k[one], top_p[one], min_p[one], vocab)
            out.append(set(ids[0, : int(kept[0])].tolist()))
        else:
            probs = torch.softmax(row[0], -1)
            out.append(set((probs >= min_p[i] * probs.max()).nonzero().squeeze(1).tolist()))
    return out


# ---- properties ---------------------------------------------------------------------------------


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**31), params=st.lists(truncation(), min_size=1,
                                                                max_size=6))
def test_kept_tokens_equal_the_per_row_reference(seed, params):
    x = random_logits(seed, len(params))
    for i, (p, kept) in enumerate(zip(params, batched_support(x, params), strict=True)):
        assert kept == set(reference_probs(x[i], p).nonzero().squeeze(1).tolist()), p


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**31), params=st.lists(truncation(), min_size=1,
                                                                max_size=3))
def test_draws_follow_the_reference_distribution(seed, params):
    """Evenly spread uniforms pick each token about as often as its reference probability."""
    n = 2000
    x = random_logits(seed, len(params))
    temperature, top_k, top_p, min_p = columns(params, VOCAB)
    uniforms = (torch.arange(n) + 0.5) / n
    for i, p in enumerate(params):

        def row(t, _i=i):
            return t[_i : _i + 1].expand(n, *t.shape[1:])

        tokens = draw(row(x) / temperature[i], row(top_k), row(top_p), row(min_p), uniforms)
        freq = torch.bincount(tokens, minlength=VOCAB).float() / n
        ref = reference_probs(x[i], p)
        assert torch.allclose(freq, ref / ref.sum(), atol=2.0 / n), p


@hypothesis.settings(max_examples=30, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**31), top_p=st.sampled_from([0.5, 0.9, 0.99, 0.9999]),
                  scale=st.sampled_from([0.1, 1.0, 4.0]), spike=st.sampled_from([0, 8, 12, 14]))
def test_top_p_rows_draw_as_from_the_whole_sorted_row(seed, top_p, scale, spike):
    """Top-p rows, their nucleus within the floor or past it (a spike over a flat tail): the
    same tokens as the whole row sorted, for the same uniforms."""
    vocab = 3000
    x = random_logits(seed, 4, vocab, scale)
    x[:, 0] += spike
    params = [SamplingParams(top_p=top_p, min_p=0.001 * (i % 2)) for i in range(4)]
    _, top_k, tp, min_p = columns(params, vocab)
    uniforms = torch.rand(4, generator=torch.Generator().manual_seed(seed))
    whole = _from_candidates(x, top_k, tp, min_p, uniforms, vocab)
    assert torch.equal(draw(x, top_k, tp, min_p, uniforms), whole)


@st.composite
def adjustment(draw_) -> tuple[SamplingParams, list[int], list[int]]:
    bias = draw_(st.dictionaries(st.integers(0, VOCAB - 1), st.sampled_from([-100.0, -2.5, 3.0]),
                                 max_size=5))
    params = SamplingParams(
        temperature=0, max_tokens=50,
        repetition_penalty=draw_(st.sampled_from([1.0, 1.0, 0.7, 1.5])),
        presence_penalty=draw_(st.sampled_from([0.0, 0.0, 1.2, -0.5])),
        frequency_penalty=draw_(st.sampled_from([0.0, 0.0, 0.4])),
        logit_bias=bias, min_tokens=draw_(st.sampled_from([0, 0, 3])),
        stop_token_ids=draw_(st.sampled_from([[], [7]])))
    prompt = draw_(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8))
    outputs = draw_(st.lists(st.integers(0, VOCAB - 1), max_size=6))
    return params, prompt, outputs


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(seed=st.integers(0, 2**31), rows=st.lists(adjustment(), min_size=1, max_size=5),
                  sampled_before=st.integers(0, 3))
def test_adjusted_logits_equal_the_per_row_reference(seed, rows, sampled_before):
    """Penalties, logit_bias and min_tokens, from counts the batch keeps current: rows added with
    their outputs, then ``sampled_before`` steps recorded, in slots out of order."""
    x = random_logits(seed, len(rows))
    batch = SamplingBatch(8, VOCAB, CPU, seed=0)
    slots = [7 - i for i in range(len(rows))]
    states = []
    for slot, (p, prompt, outputs) in zip(slots, rows, strict=True):
        states.append(new_sampling_state(p, {EOS}, VOCAB, None))
        batch.add(slot, p, prompt, outputs, None, states[-1])
    step = batch.rows(slots)
    extra = torch.tensor([[(seed + 5 * i + j) % VOCAB for i in range(len(rows))]
                          for j in range(sampled_before)], dtype=torch.int64
                         ).reshape(sampled_before, len(rows))
    for tokens in extra:
        batch.record(step, tokens)
    got = x.clone()
    apply_penalties(got, batch, step)
    apply_logit_bias(got, step)
    block_early_stop(got, batch.min_tokens_pending(step))
    for i, ((p, prompt, outputs), state) in enumerate(zip(rows, states, strict=True)):
        outs = outputs + extra[:, i].tolist()
        early = state.early_stop_ids if state is not None else []
        assert torch.allclose(got[i], reference_adjust(x[i], p, prompt, outs, early),
                              atol=1e-5), p


# ---- seeds, slots, cost -------------------------------------------------------------------------


def _run(rows: dict[int, SamplingParams], steps: int, vocab: int = 1000,
         seed_of_logits: int = 0) -> dict[int, list[int]]:
    """Sample ``steps`` steps for slot -> params (a seeded row gets its own generator); the
    logits of a slot depend only on the slot and the step."""
    sampler = Sampler(SamplingBatch(16, vocab, CPU, seed=123))
    added = []
    for slot, p in rows.items():
        gen = torch.Generator().manual_seed(p.seed) if p.seed is not None else None
        added.append(RowAdd(slot, p, [1, 2, 3], [], gen, None))
    out: dict[int, list[int]] = {slot: [] for slot in rows}
    slots = sorted(rows)
    for step in range(steps):
        started = sampler.begin(SamplingStep(slots, added=added if step == 0 else []))
        logits = torch.stack([random_logits(seed_of_logits + 1000 * s + step, 1, vocab)[0]
                              for s in slots])
        tokens, _ = sampler.sample(logits, started)
        for s, t in zip(slots, tokens.tolist(), strict=True):
            out[s].append(t)
    return out


def test_seeded_rows_are_reproducible_whatever_their_batch_mates():
    seeded = {3: SamplingParams(temperature=0.8, top_p=0.9, seed=11, frequency_penalty=0.3),
              5: SamplingParams(temperature=1.2, seed=12),
              6: SamplingParams(temperature=0.7, top_k=20, min_p=0.05, seed=13)}
    alone = _run(seeded, 12)
    mates = {0: SamplingParams(temperature=1.0, top_k=900), 1: SamplingParams(temperature=0),
             2: SamplingParams(temperature=0.5, top_p=0.999, presence_penalty=1.0),
             9: SamplingParams(temperature=0.9, seed=99, logit_bias={4: 5.0})}
    crowded = _run({**seeded, **mates}, 12)
    assert {s: crowded[s] for s in seeded} == alone
    again = _run({**seeded, **mates}, 12)
    assert again == crowded
    other_seed = _run({**seeded, 5: SamplingParams(temperature=1.2, seed=14)}, 12)
    assert other_seed[5] != alone[5]


def test_a_row_added_again_with_its_outputs_keeps_its_counts():
    """A preempted request resumes in another slot with its outputs: the same penalised logits."""
    p = SamplingParams(temperature=0, presence_penalty=1.0, frequency_penalty=0.5,
                       repetition_penalty=1.3)
    batch = SamplingBatch(4, VOCAB, CPU, seed=0)
    batch.add(0, p, [4, 5], [])
    for t in (8, 8, 9):
        batch.record(batch.rows([0]), torch.tensor([t]))
    batch.remove(0)
    batch.add(2, SamplingParams(temperature=0, frequency_penalty=2.0), [1], [])
    batch.add(3, p, [4, 5], [8, 8, 9])
    x = random_logits(1, 1)
    got = x.clone()
    apply_penalties(got, batch, batch.rows([3]))
    assert 0 not in batch and torch.allclose(got[0], reference_adjust(x[0], p, [4, 5],
                                                                      [8, 8, 9], []))


def test_full_vocabulary_logit_bias_for_32_rows_stays_cheap():
    """49,152 biased ids in each of 32 rows: a sampler step costs a few plain steps, not seconds
    (the per-row loop it replaced took about a second a step)."""
    vocab, n = 49152, 32
    bias = {t: 0.5 for t in range(vocab)}

    def step_ms(params: SamplingParams) -> float:
        sampler = Sampler(SamplingBatch(n, vocab, CPU, seed=0))
        added = [RowAdd(s, params, [1], [], None, None) for s in range(n)]
        logits = random_logits(0, n, vocab)
        sampler.sample(logits, sampler.begin(SamplingStep(list(range(n)), added=added)))
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            sampler.sample(logits, sampler.begin(SamplingStep(list(range(n)))))
            best = min(best, time.perf_counter() - start)
        return best * 1000

    plain = step_ms(SamplingParams(temperature=0.8, top_p=0.95))
    biased = step_ms(SamplingParams(temperature=0.8, top_p=0.95, logit_bias=bias))
    assert biased < 6 * plain + 20, (biased, plain)


@pytest.mark.parametrize("greedy_rows", [0, 2])
def test_min_p_one_and_top_k_one_pick_the_best_token(greedy_rows):
    params = [SamplingParams(temperature=0)] * greedy_rows + [
        SamplingParams(temperature=1.5, top_k=1), SamplingParams(temperature=1.5, min_p=1.0),
        SamplingParams(temperature=1.5, top_p=1e-6)]
    x = random_logits(3, len(params), 1000)
    sampler = Sampler(SamplingBatch(8, 1000, CPU, seed=0))
    added = [RowAdd(s, p, [1], [], None, None) for s, p in enumerate(params)]
    tokens, _ = sampler.sample(x, sampler.begin(SamplingStep(list(range(len(params))),
                                                             added=added)))
    assert tokens.tolist() == x.argmax(-1).tolist()



def test_min_tokens_mask_spares_only_rows_left_with_nothing_else():
    """min_tokens masks EOS in the pending rows of a batch; a row whose other tokens are all
    masked already (a grammar that can only end) keeps its EOS; a row not pending is untouched."""
    eos = torch.tensor([EOS])
    logits = torch.full((3, VOCAB), float("-inf"))
    logits[:, EOS] = 1.0
    logits[1, EOS + 1] = 2.0
    before = logits.clone()
    block_early_stop(logits, [(0, eos), (1, eos)])
    assert logits[0, EOS] == 1.0  # nothing else allowed: the ending stays
    assert logits[1, EOS].isinf() and logits[1, EOS + 1] == 2.0  # another token left: masked
    assert torch.equal(logits[2], before[2])  # not pending
