"""The built-in SmolLM2 model with random rank-8 PEFT adapters: mstar's greedy tokens equal
transformers with PEFT's merge_and_unload(), per adapter, in one mixed batch of the base and
three adapters."""

from __future__ import annotations

import pytest
from lora_helpers import ATTN, MLP, make_adapter, merged_greedy

from mstar.engine.request.sampling_params import SamplingParams

QUESTIONS = ["What is the capital of France?", "List three prime numbers."]
MAX_NEW = 16
ADAPTERS = {"attn": (21, ATTN), "mlp": (22, MLP), "all": (23, ATTN + MLP)}


def test_mixed_batch_matches_merged_adapters(builtin_cache_dir, tmp_path):
    from mstar import LLM

    adapters = {}
    llm = LLM(device="cpu", dtype="float32", cache_dir=str(builtin_cache_dir), max_model_len=512,
              num_kv_blocks=128, allow_runtime_lora_updating=True, max_lora_rank=8)
    base = llm.engine.model_dir
    for name, (seed, targets) in ADAPTERS.items():
        adapters[name] = make_adapter(base, tmp_path / name, seed, targets, alpha=8)
        llm.engine.load_lora(name, adapters[name])
    tok = llm.tokenizer
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": q}],
                                            add_generation_prompt=True, tokenize=True,
                                            return_dict=False)) for q in QUESTIONS]
    pairs = [(lora, p) for lora in (None, *ADAPTERS) for p in prompts]
    params = [SamplingParams(temperature=0, max_tokens=MAX_NEW, lora=lora)
              for lora, _ in pairs]
    results = llm.generate([{"prompt_token_ids": p} for _, p in pairs], params)
    got: dict = {}
    for (lora, _), r in zip(pairs, results, strict=True):
        got.setdefault(lora, []).append(r.token_ids)
    for lora in (None, *ADAPTERS):
        ref = merged_greedy(base, None if lora is None else adapters[lora], prompts, MAX_NEW)
        assert got[lora] == ref, lora
    assert len({str(v) for v in got.values()}) == 4  # every adapter changed the answers


pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
