"""LoRA under tensor parallelism (docs/lora.rst): two ranks (gloo, two processes on CPU) give the
greedy tokens of one process for the base model and three adapters in one batch.

Each rank holds its part of every pair: B's rows on the column-parallel q/k/v and gate/up, A's
columns on the row-parallel o_proj and down_proj (whose partial deltas ride on the base's
all-reduce). One adapter is loaded at run time, on every rank, as ``/v1/load_lora_adapter``
reaches them. One process is checked against transformers + PEFT in test_lora_parity.py.
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
def base(tiny_tokenizer, tmp_path_factory) -> Path:
    """A tiny random Llama with one KV head: the two ranks hold 2 query heads each and the same
    (replicated) KV head, so B's k and v rows are the same on both and its q rows differ."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(5)
    config = LlamaConfig(vocab_size=len(tiny_tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                         max_position_embeddings=512, tie_word_embeddings=False,
                         eos_token_id=tiny_tokenizer.eos_token_id, initializer_range=0.1,
                         bos_token_id=tiny_tokenizer.bos_token_id)
    path = tmp_path_factory.mktemp("base")
    LlamaForCausalLM(config).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def adapters(base, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {name: make_adapter(base, root / name, seed, targets)
            for name, (seed, targets) in ADAPTERS.items()}


def test_tp2_matches_tp1_for_the_base_and_three_adapters(base, adapters, tmp_path):
    at_start = ",".join(f"{n}={p}" for n, p in adapters.items() if n != AT_RUN_TIME)
    settings = WorkerSettings(model=str(base), device="cpu", dtype="float32",
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


def _rank1_of_2():
    """What ``rank_part`` reads of a sharded model: rank 1 of 2, 4 heads of 16, 1 KV head."""
    from types import SimpleNamespace

    from mstar.models.families.parallel import Shapes, TensorParallel

    return SimpleNamespace(tp=TensorParallel(rank=1, size=2),
                           tp_shapes=Shapes(num_heads=4, num_kv_heads=1, head_dim=16,
                                            intermediate=128, vocab=400))


@pytest.mark.parametrize(("module", "out", "inp", "b_rows", "a_cols"), [
    ("self_attn.q_proj", 64, 64, slice(32, 64), slice(None)),  # the rank's 2 query heads
    ("self_attn.k_proj", 16, 64, slice(0, 16), slice(None)),  # the one KV head, on both ranks
    ("mlp.up_proj", 128, 64, slice(64, 128), slice(None)),
    ("self_attn.o_proj", 64, 64, slice(None), slice(32, 64)),  # row-parallel: A's columns
    ("mlp.down_proj", 64, 128, slice(None), slice(64, 128)),
])
def test_a_rank_keeps_the_base_weights_cut_of_each_pair(module, out, inp, b_rows, a_cols):
    import torch

    from mstar.models.lora.adapter import rank_part

    a, b = torch.randn(8, inp), torch.randn(out, 8)  # PEFT's A [r, in] and B [out, r]
    got_a, got_b = rank_part("x", _rank1_of_2(), f"model.layers.0.{module}.weight", a, b)
    assert torch.equal(got_a, a[:, a_cols]) and torch.equal(got_b, b[b_rows])


def test_a_pair_too_small_for_the_ranks_cut_is_refused_naming_it():
    import torch

    from mstar.models.lora.adapter import AdapterError, rank_part

    with pytest.raises(AdapterError, match=r"'x': model.layers.0.self_attn.q_proj.weight has 48 "
                                           r"rows, this rank needs \[32, 64\)"):
        rank_part("x", _rank1_of_2(), "model.layers.0.self_attn.q_proj.weight",
                  torch.randn(8, 64), torch.randn(48, 8))
