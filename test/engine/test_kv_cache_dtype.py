"""MSTAR_KV_CACHE_DTYPE: the rule ``auto`` follows, the values refused, and an engine that keeps a
bf16 cache under float32 activations (twice the blocks in the same bytes, and it generates through
chunked prefill over cached context, prefix hits and decode)."""

from __future__ import annotations

import pytest
import torch
from structlog.testing import capture_logs

from mstar.engine.placement import resolve_kv_dtype
from mstar.models.layers.cpu_linear import native_bf16
from mstar.settings import WorkerSettings

CPU = torch.device("cpu")
F32, BF16 = torch.float32, torch.bfloat16


def kv(value: str, dtype: torch.dtype, quantization: str, device: torch.device = CPU):
    return resolve_kv_dtype(WorkerSettings(kv_cache_dtype=value), device, dtype, quantization)


@pytest.mark.parametrize("quantization", ["q4", "int8", "shipped"])
def test_auto_halves_the_cache_of_quantized_linears_under_float32_activations(quantization):
    if not native_bf16():
        pytest.skip("auto keeps float32 without native bf16 (avx512_bf16 or AMX) on the CPU")
    assert kv("auto", F32, quantization) == BF16


def test_auto_keeps_the_float32_cache_without_native_bf16():
    if native_bf16():
        pytest.skip("needs a CPU without native bf16 (avx512_bf16 or AMX)")
    assert kv("auto", F32, "q4") == F32


@pytest.mark.parametrize(("dtype", "quantization"), [(F32, "none"), (BF16, "none"), (BF16, "q4")])
def test_auto_is_the_activations_dtype_elsewhere(dtype, quantization):
    """Dense float32 keeps its exact parity with transformers; bf16 activations a bf16 cache."""
    assert kv("auto", dtype, quantization) == dtype


def test_set_values_and_the_one_refused():
    assert kv("bfloat16", F32, "none") == BF16
    assert kv("float32", F32, "q4") == F32
    assert kv("bfloat16", BF16, "none") == BF16
    with pytest.raises(ValueError, match="MSTAR_KV_CACHE_DTYPE=float32 needs .* bfloat16"):
        kv("float32", BF16, "none")


def test_on_cuda_the_cache_takes_the_activations_dtype_and_says_the_knob_does_nothing():
    with capture_logs() as logs:
        assert kv("bfloat16", F32, "q4", torch.device("cuda")) == F32
        assert kv("auto", BF16, "none", torch.device("cuda")) == BF16
    assert [log["event"] for log in logs] == ["kv_cache_dtype_ignored"]  # not for auto


def test_an_engine_with_a_bf16_cache_holds_twice_the_blocks_and_generates(
        tiny_model_dir, make_engine, run, device):
    if device != "cpu":
        pytest.skip("a CPU knob")
    from mstar.engine.request.sampling_params import SamplingParams

    model = tiny_model_dir("llama")
    budget = {"cpu_kv_cache_gb": 0.002, "quantization": "q4", "max_prefill_chunk_tokens": 8}
    wide = make_engine(model, kv_cache_dtype="float32", **budget)
    half = make_engine(model, kv_cache_dtype="bfloat16", **budget)
    assert wide.model_runner.kv_cache.dtype == F32 and half.model_runner.kv_cache.dtype == BF16
    assert half.model_runner.num_blocks in (2 * wide.model_runner.num_blocks,
                                            2 * wide.model_runner.num_blocks + 1)
    prompt = list(range(5, 40))  # 35 tokens: chunks of 8 attend the earlier ones from the cache
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    first = run(half, {"a": (prompt, params)})["a"]
    again = run(half, {"b": (prompt, params)})["b"]  # a prefix hit: the prompt's blocks reread
    assert len(first["token_ids"]) == 12 and again["cached_tokens"] > 0
    assert again["token_ids"] == first["token_ids"]
