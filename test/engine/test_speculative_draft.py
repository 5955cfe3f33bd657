"""The draft proposer (``MSTAR_SPECULATIVE_METHOD=draft``): a small model of the target's
tokenizer proposes; the output is what it is without speculation, token for token (greedy); the
draft's own KV cache rolls back to what the target accepted and frees its blocks when requests
finish, are aborted or preempted; a draft of another vocabulary, or none, falls back to none."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from conftest import _config
from test_speculative_decoding import MAX_NEW, TEXTS, _requests, _tokens

from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings
from mstar.settings.checks.speculative_checks import speculation_off_reason

# speculative_gate=False: every proposed draft is verified, whatever this machine's step timings
# (the gate itself: test_speculative_gate.py).
BLOCKS = 64


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory, tiny_tokenizer):
    """A one-layer random Llama of the tiny tokenizer (other weights than any target)."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _config("llama", len(tiny_tokenizer), tiny_tokenizer.eos_token_id,
                     tiny_tokenizer.bos_token_id)
    config.num_hidden_layers = 1
    torch.manual_seed(99)
    path = tmp_path_factory.mktemp("tiny-draft")
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


def _draft(path, **more) -> dict:
    return {"speculative_method": "draft", "speculative_draft_model": str(path),
            "speculative_gate": False, "num_speculative_tokens": 4, "speculative_min_acceptance": 0.0, **more}


def _all_free(engine, blocks: int) -> bool:
    return (engine.stats().free_blocks == blocks
            and engine.speculation.draft.num_free_blocks == blocks
            and not engine.speculation.draft.cached)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_greedy_output_is_identical_with_a_draft_model(family, tiny_model_dir, draft_dir,
                                                       make_engine, run, prompts):
    model_dir = tiny_model_dir(family)
    requests = _requests(prompts)
    plain = run(make_engine(model_dir, kv_block_size=4, num_kv_blocks=BLOCKS), requests)
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=BLOCKS, **_draft(draft_dir))
    assert _tokens(run(engine, requests)) == _tokens(plain)
    s = engine.stats()
    assert s.spec_method == "draft" and s.spec_proposed > s.spec_accepted and s.spec_propose_s > 0
    assert _all_free(engine, BLOCKS)


def test_a_draft_equal_to_the_target_is_accepted_whole(tiny_model_dir, make_engine, run,
                                                       prompts):
    """The target as its own draft: every greedy draft matches, so the draft's cache (rolled
    back after the last draft of each run, which it never feeds) holds the right K/V."""
    model_dir = tiny_model_dir("llama")
    requests = _requests(prompts)
    plain = run(make_engine(model_dir, kv_block_size=4, num_kv_blocks=BLOCKS), requests)
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=BLOCKS, **_draft(model_dir))
    assert _tokens(run(engine, requests)) == _tokens(plain)
    stats = engine.speculation.stats
    assert stats.accepted == stats.proposed > len(prompts) * MAX_NEW // 2
    assert engine.speculation.stats.steps < len(prompts) * MAX_NEW // 2  # runs, not one by one


def test_rolled_back_proposals_equal_a_fresh_cache(tiny_model_dir, draft_dir, make_engine,
                                                   prompts):
    """Whatever the target accepted of the last drafts, the next proposal is what a draft
    cache that never saw the rejected drafts proposes."""
    import torch

    from mstar.engine.request.sequence import Sequence
    from mstar.engine.speculative.draft_model import DraftModel

    def draft_model():
        settings = WorkerSettings(model=str(draft_dir), kv_block_size=4, num_kv_blocks=BLOCKS)
        return DraftModel(settings, draft_dir, torch.device("cpu"), torch.float32, 512)

    kept, rng = draft_model(), random.Random(5)
    seqs = [Sequence(f"s{i}", p, SamplingParams(max_tokens=100), None) for i, p in
            enumerate(prompts)]
    for _ in range(8):
        wants = [(seq, rng.randint(1, 4)) for seq in seqs]
        proposed = kept.propose(wants)
        assert proposed == draft_model().propose(wants)
        for seq, _ in wants:  # the target keeps a random share of the drafts, then its own token
            drafts = proposed[seq.seq_no]
            seq.token_ids += [*drafts[:rng.randint(0, len(drafts))], rng.randrange(300)]
    for seq in seqs:
        kept.release(seq.seq_no)
    assert kept.num_free_blocks == BLOCKS


def test_seeded_sampling_is_reproducible(tiny_model_dir, draft_dir, make_engine, run, prompts):
    model_dir = tiny_model_dir("llama")
    requests = _requests(prompts, temperature=0.8, top_p=0.9, seed=7)
    first = run(make_engine(model_dir, **_draft(draft_dir)), requests)
    engine = make_engine(model_dir, **_draft(draft_dir))
    assert _tokens(run(engine, requests)) == _tokens(first)
    assert engine.speculation.stats.proposed > 0


def test_preemption_prefix_caching_and_aborts_free_the_draft_cache(tiny_model_dir, make_engine,
                                                                    run, prompts):
    """A small cache preempts speculating requests; repeated prompts hit the prefix cache (the
    draft's too); the output is as without speculation and every block comes back, also after
    aborts mid-run."""
    model_dir = tiny_model_dir("qwen3")
    requests = _requests(prompts + prompts[:2])
    plain = run(make_engine(model_dir, kv_block_size=4, num_kv_blocks=28), requests)
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=28, **_draft(model_dir))
    spec = run(engine, requests)
    assert engine.scheduler.num_preemptions > 0
    assert engine.speculation.stats.accepted > 0
    assert _tokens(spec) == _tokens(plain)
    assert sum(r["cached_tokens"] for r in spec.values()) > 0
    assert _all_free(engine, 28)
    for rid, (prompt, params) in _requests(prompts).items():
        engine.add_request(rid, prompt, params)
    for _ in range(3):
        engine.step()
    assert engine.speculation.draft.cached  # drafting mid-run
    for rid in list(engine.seqs):
        engine.abort_request(rid)
    assert _all_free(engine, 28)


def test_a_draft_of_another_vocabulary_or_none_falls_back(tiny_model_dir, draft_dir, tmp_path,
                                                          make_engine):
    target = tiny_model_dir("llama")
    settings = WorkerSettings(model=str(target), **_draft(draft_dir))
    assert speculation_off_reason(settings, target / "config.json") is None
    other = tmp_path / "other-vocab"
    shutil.copytree(draft_dir, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps(config | {"vocab_size": 512}))
    reason = speculation_off_reason(settings.model_copy(
        update={"speculative_draft_model": str(other)}), target / "config.json")
    assert "vocabulary" in reason and "falling back to none" in reason
    (other / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = list(vocab)[:2]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert "tokenizer" in speculation_off_reason(settings.model_copy(
        update={"speculative_draft_model": str(other)}), target / "config.json")
    engine = make_engine(target, speculative_method="draft", speculative_draft_model=str(other))
    assert engine.speculation is None
    with pytest.raises(ValueError, match="no draft model is set"):
        make_engine(target, speculative_method="draft", config_strictness="strict")
