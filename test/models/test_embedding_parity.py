"""Pooling requests (embeddings): the vectors equal transformers' final hidden states (after the
final norm) pooled the same way, fp32 on CPU, whatever the batching, chunking or caching."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoConfig, AutoModelForCausalLM

from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import Pooler, bytes_vector
from mstar.engine.schedule.scheduler_output import NewRequest, ScheduledRow, SchedulerOutput
from mstar.models.loading.resolve import resolve_model_dir
from mstar.settings import WorkerSettings

TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany. "
    "A paged KV cache stores keys and values in fixed-size blocks.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9",
]
TOLERANCE = 1e-4


def reference_vectors(model_dir, prompts: list[list[int]], pooling: str) -> list[np.ndarray]:
    """transformers, each prompt alone: the last hidden state (after the final norm) pooled."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    for ids in prompts:
        with torch.inference_mode():
            hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
        out.append((hidden[-1] if pooling == "last" else hidden.mean(0)).numpy())
    return out


def _pooled(results: dict, rid: str) -> np.ndarray:
    assert results[rid]["finish_reason"] == "stop" and results[rid]["token_ids"] == []
    return bytes_vector(results[rid]["embedding"])


def _max_diff(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    return float(np.abs(got - want).max())


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


@pytest.mark.parametrize("pooling", ["last", "mean"])
@pytest.mark.parametrize("chunk", [None, 5])
def test_tiny_model_vectors_match_transformers(pooling, chunk, tiny_model_dir, make_engine, run,
                                               prompts):
    model_dir = tiny_model_dir("llama")
    extra = {} if chunk is None else {"max_num_batched_tokens": chunk}
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=128, **extra)
    params = SamplingParams(pooling=pooling)
    # Twice: the second round finds the first one's blocks in the prefix cache.
    for _ in range(2):
        results = run(engine, {f"r{i}": (p, params) for i, p in enumerate(prompts)})
        want = reference_vectors(model_dir, prompts, pooling)
        for i in range(len(prompts)):
            assert _max_diff(_pooled(results, f"r{i}"), want[i]) < TOLERANCE, (pooling, i)
    assert engine.stats().free_blocks == 128  # no block stays held (cached ones count as free)
    assert not engine.model_runner.pooler.sums  # no running sum outlives its request


@pytest.mark.parametrize("overlap", [0, 1024])  # the serial and the overlapped step loop
def test_mixed_with_generation(overlap, tiny_model_dir, make_engine, run, prompts,
                               greedy_reference):
    """Embedding and generation requests in one batch: each gets what it would alone."""
    model_dir = tiny_model_dir("qwen3")
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=128,
                         max_consecutive_spec_steps=overlap)
    greedy = SamplingParams(temperature=0, max_tokens=8)
    requests = {}
    for i, p in enumerate(prompts):
        requests[f"g{i}"] = (p, greedy)
        requests[f"e{i}"] = (p, SamplingParams(pooling="last" if i % 2 else "mean"))
    results = run(engine, requests)
    tokens = greedy_reference(model_dir, prompts, 8)
    for i, p in enumerate(prompts):
        assert results[f"g{i}"]["token_ids"] == tokens[i]
        want = reference_vectors(model_dir, [p], "last" if i % 2 else "mean")[0]
        assert _max_diff(_pooled(results, f"e{i}"), want) < TOLERANCE
    assert not engine.has_unfinished_requests() and engine.stats().free_blocks == 128


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=4), chunk=st.integers(1, 16),
       data=st.data())
def test_pooler_is_the_same_whatever_the_chunks(lengths, chunk, data):
    """Property: split the prompts into steps of at most ``chunk`` tokens any way the scheduler
    could; the pooled vectors are the full prompt's last row and mean."""
    hidden = [torch.randn(n, 3) for n in lengths]
    modes = [data.draw(st.sampled_from(["last", "mean"])) for _ in lengths]
    pooler, done, got, key_step = Pooler(), [0] * len(lengths), {}, 0
    new = tuple(NewRequest(k, tuple(range(n)), n, None, SamplingParams(pooling=m), None, None)
                for k, (n, m) in enumerate(zip(lengths, modes, strict=True)))
    while len(got) < len(lengths):
        rows, parts = [], []
        for k, n in enumerate(lengths):
            if done[k] < n:
                take = data.draw(st.integers(1, min(chunk, n - done[k])))
                rows.append(ScheduledRow(k, done[k], take, (), done[k] + take == n))
                parts.append(hidden[k][done[k]:done[k] + take])
                done[k] += take
        out = SchedulerOutput(tuple(rows), new if key_step == 0 else ())
        pooler.apply(out)
        got.update(pooler.pool(out, [r.num_tokens for r in rows], torch.cat(parts)))
        key_step += 1
    for k, (h, mode) in enumerate(zip(hidden, modes, strict=True)):
        want = h[-1] if mode == "last" else h.mean(0)
        assert np.allclose(bytes_vector(got[k]), want.numpy(), atol=1e-5)
    assert not pooler.sums


def test_auto_pooling_reads_sentence_transformers_config(tiny_model_dir, make_engine, tmp_path):
    import shutil

    model_dir = tmp_path / "st"
    shutil.copytree(tiny_model_dir("llama"), model_dir)
    assert make_engine(model_dir, num_kv_blocks=16).pooling == "last"
    (model_dir / "1_Pooling").mkdir()
    (model_dir / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    assert make_engine(model_dir, num_kv_blocks=16).pooling == "mean"
    assert make_engine(model_dir, num_kv_blocks=16, embedding_pooling="last").pooling == "last"


def test_input_limits(tiny_model_dir, make_engine, run):
    engine = make_engine(tiny_model_dir("llama"), kv_block_size=4, num_kv_blocks=64,
                         max_model_len=32)
    for ids in ([], [5] * 33):
        with pytest.raises(RequestRejected) as exc:
            engine.add_request("x", ids, SamplingParams(pooling="last"))
        assert exc.value.param == "input"
    results = run(engine, {"full": ([5] * 32, SamplingParams(pooling="last"))})  # exactly the limit
    hidden_size = AutoConfig.from_pretrained(tiny_model_dir("llama")).hidden_size
    assert len(_pooled(results, "full")) == hidden_size
    assert engine.stats().free_blocks == 64  # no block stays held


def test_builtin_model_vectors_match_transformers(builtin_cache_dir, run):
    from mstar.engine.llm_engine import LLMEngine

    engine_settings = WorkerSettings(cache_dir=builtin_cache_dir, device="cpu", dtype="float32",
                                     max_model_len=512, num_kv_blocks=128)
    engine = LLMEngine(engine_settings)
    prompts = [engine.tokenizer.encode(t) for t in TEXTS]
    requests = {f"{pooling}{i}": (p, SamplingParams(pooling=pooling))
                for pooling in ("last", "mean") for i, p in enumerate(prompts)}
    requests["gen"] = (prompts[1], SamplingParams(temperature=0, max_tokens=4))
    results = run(engine, requests)
    model_dir = resolve_model_dir(engine_settings)
    for pooling in ("last", "mean"):
        want = reference_vectors(model_dir, prompts, pooling)
        for i in range(len(prompts)):
            assert _max_diff(_pooled(results, f"{pooling}{i}"), want[i]) < 1e-3, (pooling, i)
    assert len(results["gen"]["token_ids"]) == 4


def test_offline_llm_embed(tiny_model_dir, prompts, device):
    from mstar import LLM

    model_dir = tiny_model_dir("llama")
    llm = LLM(str(model_dir), device=device, dtype="float32", num_kv_blocks=64)
    got = llm.embed([{"prompt_token_ids": p} for p in prompts[:2]], pooling="mean")
    want = reference_vectors(model_dir, prompts[:2], "mean")
    assert all(_max_diff(np.asarray(g, np.float32), w) < TOLERANCE
               for g, w in zip(got, want, strict=True))
