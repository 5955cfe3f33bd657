"""LoRA under tensor parallelism (docs/lora.rst): two ranks (gloo, two processes on CPU) give the
greedy tokens of one process for the base model and three adapters in one batch.

Each rank holds its part of every pair: B's rows on the column-parallel q/k/v and gate/up, A's
columns on the row-parallel o_proj and down_proj (whose partial deltas ride on the base's
all-reduce). One adapter is loaded at run time, on every rank, as ``/v1/load_lora_adapter``
reaches them. One process's tokens equal transformers + PEFT's (test_lora_parity.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lora_helpers import ATTN, MLP, make_adapter
from tp_group import run_group

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.settings import WorkerSettings

MAX_NEW = 8
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Paris is the capital of"]
# name -> (seed, target modules): attention only, MLP only, every projection (loaded at run time)
ADAPTERS = {"attn": (1, ATTN), "mlp": (2, MLP), "all": (3, ATTN + MLP)}
AT_RUN_TIME = "all"


def _generate(settings: WorkerSettings, run_time: Path, parallel=None) -> dict:
    """Greedy tokens per (adapter, prompt), every pair in one batch (None: the base model)."""
    engine = LLMEngine(settings, parallel=parallel)
    engine.load_lora(AT_RUN_TIME, run_time)
    tokens = {}
    for lora in (None, *ADAPTERS):
        for i, text in enumerate(TEXTS):
            params = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True, lora=lora)
            engine.add_request(f"{lora}/{i}", engine.tokenizer.encode(text), params)
            tokens[f"{lora}/{i}"] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
    engine.shutdown()
    return tokens


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    base, root = tiny_model_dir("llama"), tmp_path_factory.mktemp("adapters")
    return {name: make_adapter(base, root / name, seed, targets)
            for name, (seed, targets) in ADAPTERS.items()}


def test_tp2_matches_tp1_for_the_base_and_three_adapters(tiny_model_dir, adapters, tmp_path):
    at_start = ",".join(f"{n}={p}" for n, p in adapters.items() if n != AT_RUN_TIME)
    # 4 heads and 2 KV heads: each rank holds 2 query heads and 1 KV head of q/k/v's B rows.
    settings = WorkerSettings(model=str(tiny_model_dir("llama")), device="cpu", dtype="float32",
                              num_kv_blocks=64, max_model_len=256, tensor_parallel_size=2,
                              lora_modules=at_start, allow_runtime_lora_updating=True,
                              max_loras=4, max_lora_rank=8)
    args = (settings, adapters[AT_RUN_TIME])
    single = _generate(settings.model_copy(update={"tensor_parallel_size": 1}), *args[1:])
    ranks = run_group(_generate, args, 2, tmp_path)
    assert ranks[0] == ranks[1]  # every rank took the same steps and the same tokens
    assert ranks[0] == single
    # The adapters change the tokens, so a group that dropped a delta would differ.
    for lora in ADAPTERS:
        assert [single[f"{lora}/{i}"] for i in range(len(TEXTS))] != \
               [single[f"None/{i}"] for i in range(len(TEXTS))]
