"""Tensor parallelism over gloo on CPU: a TP group generates what one process generates.

Each rank is a spawned process that joins the group, builds its shard of the engine and runs the
same requests; the ranks' logits (every step, full vocabulary) and tokens are compared with a
single-process engine's. Tiny models; one torch thread per rank (the machine is small).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from tp_group import run_group

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams, StructuredOutput
from mstar.models.families.parallel import check_divisible
from mstar.settings import WorkerSettings

MAX_NEW = 24
PROMPTS = ["The quick brown fox", "Paris is the capital of", "def add(a, b):"]


def _requests(tokenizer) -> dict:
    greedy = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
    sampled = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_tokens=MAX_NEW,
                             ignore_eos=True)
    reqs = {f"greedy{i}": (tokenizer.encode(p), greedy) for i, p in enumerate(PROMPTS)}
    reqs["sampled"] = (tokenizer.encode(PROMPTS[0]), sampled)
    # Every rank must mask and penalise alike: a grammar and penalties, sampled.
    reqs["constrained"] = (tokenizer.encode(PROMPTS[1]), SamplingParams(
        temperature=0.8, seed=3, max_tokens=MAX_NEW, presence_penalty=0.5, frequency_penalty=0.3,
        structured_output=StructuredOutput(kind="regex", spec="[a-z ]{1,60}")))
    return reqs


def _generate(settings: WorkerSettings, parallel=None) -> dict:
    """Tokens per request and the logits of every step, in step order."""
    engine = LLMEngine(settings, parallel=parallel)
    model = engine.model_runner.model
    logits: list[torch.Tensor] = []
    compute = model.compute_logits

    def recording(hidden):
        out = compute(hidden)
        logits.append(out.detach().clone())
        return out

    model.compute_logits = recording
    requests = _requests(engine.tokenizer)
    tokens = {rid: [] for rid in requests}
    for rid, (ids, params) in requests.items():
        engine.add_request(rid, ids, params)
    # Every engine compiles grammars in the background and admits them at a step (ranks as rank 0
    # decides). Wait for the compiles, so that both take the same steps and their logits line up.
    while not engine.grammars.all_compiled():
        time.sleep(0.01)
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
    engine.shutdown()
    return {"tokens": tokens, "logits": logits}


def _assert_group_matches_single(settings: WorkerSettings, tmp_path: Path) -> None:
    single = _generate(settings.model_copy(update={"tensor_parallel_size": 1}))
    ranks = run_group(_generate, (settings,), settings.tensor_parallel_size, tmp_path)
    for rank in ranks:  # every rank took the same steps and sampled the same tokens
        assert rank["tokens"] == ranks[0]["tokens"]
    assert ranks[0]["tokens"] == single["tokens"]
    # The constrained request may end early: its grammar allows EOS once it matched.
    assert all(len(t) == MAX_NEW for rid, t in single["tokens"].items() if rid != "constrained")
    assert single["tokens"]["constrained"]
    assert len(ranks[0]["logits"]) == len(single["logits"])
    # float32 rounding only: the ranks' partial sums are all-reduced in another order than one
    # process adds them; over the built-in model's 30 layers that reaches ~1e-4 near zero logits.
    for got, want in zip(ranks[0]["logits"], single["logits"], strict=True):
        torch.testing.assert_close(got, want, atol=3e-4, rtol=1e-4)


def _settings(model: Path | str, size: int, **extra) -> WorkerSettings:
    return WorkerSettings(model=str(model), device="cpu", dtype="float32", num_kv_blocks=64,
                          max_model_len=256, tensor_parallel_size=size, **extra)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_tp2_matches_tp1_on_tiny_models(tiny_model_dir, family, tmp_path):
    _assert_group_matches_single(_settings(tiny_model_dir(family), 2), tmp_path)


def test_tp3_matches_tp1_on_the_builtin_models_head_layout(tiny_tokenizer, tmp_path):
    """The built-in model's 9 attention heads and 3 KV heads (tied embeddings): 3 ranks of 3
    heads, one KV head each; a tiny random model of that layout, so the 3 ranks load in seconds."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(9)
    config = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=72, intermediate_size=96,
                         num_hidden_layers=3, num_attention_heads=9, num_key_value_heads=3,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         eos_token_id=tiny_tokenizer.eos_token_id, initializer_range=0.1,
                         bos_token_id=tiny_tokenizer.bos_token_id)
    model_dir = tmp_path / "model"
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tiny_tokenizer.save_pretrained(model_dir)
    _assert_group_matches_single(_settings(model_dir, 3), tmp_path)


def test_size_that_does_not_divide_the_heads_names_the_numbers():
    from transformers import LlamaConfig

    config = LlamaConfig(num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
                         intermediate_size=1536, architectures=["LlamaForCausalLM"])
    with pytest.raises(ValueError, match="tensor_parallel_size=2 does not divide the model's 9 "
                                         "attention heads"):
        check_divisible(config, 2)


def test_family_without_tensor_parallelism_is_refused():
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(architectures=["Gemma3ForCausalLM"])
    with pytest.raises(ValueError, match="Gemma3ForCausalLM family does not support tensor"):
        check_divisible(config, 2)


def test_replicas_and_ranks_go_to_distinct_devices_of_the_list():
    from mstar.engine.placement import device_index, device_slot

    slots = [device_slot(replica, rank, 2) for replica in range(2) for rank in range(2)]
    assert [device_index([3, 1, 0, 2], 8, s) for s in slots] == [3, 1, 0, 2]
    assert [device_index(None, 4, s) for s in slots] == [0, 1, 2, 3]
    assert [device_index([5, 6], 8, s) for s in slots] == [5, 6, 5, 6]  # more ranks than devices
