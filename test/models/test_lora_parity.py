"""LoRA adapters (PEFT format) on a tiny random Llama: mstar's greedy tokens equal transformers'
with PEFT's merge_and_unload(), per adapter, in one mixed batch of the base and three adapters."""

from __future__ import annotations

import pytest
from lora_helpers import ATTN, MLP, make_adapter, merged_greedy

from mstar.engine.request.sampling_params import SamplingParams

MAX_NEW = 12
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "Hello",
]
# name -> (seed, target modules, rsLoRA): attention only, MLP only, and every projection.
ADAPTERS = {"attn": (1, ATTN, False), "mlp": (2, MLP, False), "all": (3, ATTN + MLP, True)}


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    base = tiny_model_dir("llama")
    root = tmp_path_factory.mktemp("adapters")
    return {name: make_adapter(base, root / name, seed, targets, rslora=rslora)
            for name, (seed, targets, rslora) in ADAPTERS.items()}


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    return [tiny_tokenizer.encode(t) for t in TEXTS]


@pytest.fixture(scope="module")
def references(tiny_model_dir, adapters, prompts):
    base = tiny_model_dir("llama")
    refs = {None: merged_greedy(base, None, prompts, MAX_NEW)}
    refs |= {name: merged_greedy(base, path, prompts, MAX_NEW) for name, path in adapters.items()}
    return refs


@pytest.fixture(scope="module")
def llm(tiny_model_dir, adapters):
    from mstar import LLM

    modules = ",".join(f"{name}={path}" for name, path in adapters.items())
    # Two slots for three adapters: the mixed batch runs them in turns, evicting the idle one.
    return LLM(str(tiny_model_dir("llama")), device="cpu", dtype="float32", kv_block_size=4,
               num_kv_blocks=256, lora_modules=modules, max_loras=2, max_lora_rank=8)


def _greedy(llm, prompts, loras) -> dict:
    """Every (adapter, prompt) pair in one generate call: one mixed batch."""
    pairs = [(lora, i) for lora in loras for i in range(len(prompts))]
    params = [SamplingParams(temperature=0.0, max_tokens=MAX_NEW, ignore_eos=True, lora=lora)
              for lora, _ in pairs]
    results = llm.generate([{"prompt_token_ids": prompts[i]} for _, i in pairs], params)
    out: dict = {}
    for (lora, _), r in zip(pairs, results, strict=True):
        out.setdefault(lora, []).append(r.token_ids)
    return out


def test_adapters_change_the_output(references):
    """The references differ, so a parity that ignored the adapters would fail."""
    outputs = [references[name] for name in (None, *ADAPTERS)]
    assert all(a != b for i, a in enumerate(outputs) for b in outputs[i + 1:])


def test_mixed_batch_matches_merged_adapters(llm, prompts, references):
    # The base alone first: its prompt blocks are then in the prefix cache, and the adapters'
    # requests for the same prompts must not reuse them (their K/V differ).
    assert _greedy(llm, prompts, [None])[None] == references[None]
    got = _greedy(llm, prompts, [None, *ADAPTERS])
    assert got == references
    slots = llm.engine.model_runner.lora
    assert slots.loads == 3 and slots.evictions >= 1


def test_unknown_adapter_is_refused(llm, prompts):
    with pytest.raises(ValueError, match="'nope' does not exist"):
        llm.generate([{"prompt_token_ids": prompts[0]}], SamplingParams(lora="nope"))
