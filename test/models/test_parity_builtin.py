"""The built-in SmolLM2 model: greedy chat answers match transformers on the same weights."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.models.loading.resolve import resolve_model_dir
from mstar.settings import WorkerSettings

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers.",
]
MAX_NEW = 24


@pytest.fixture(scope="module")
def settings(builtin_cache_dir):
    # float32: the greedy text is compared exactly (auto would pick bf16 on most CPUs).
    return WorkerSettings(cache_dir=builtin_cache_dir, device="cpu", dtype="float32",
                          max_model_len=512, num_kv_blocks=128)


def test_builtin_greedy_matches_transformers(settings, run):
    engine = LLMEngine(settings)
    tok = engine.tokenizer
    prompts = [
        list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                     tokenize=True, return_dict=False))
        for q in QUESTIONS
    ]
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW)
    got = run(engine, {str(i): (p, params) for i, p in enumerate(prompts)})
    model = AutoModelForCausalLM.from_pretrained(resolve_model_dir(settings),
                                                 dtype=torch.float32).eval()
    for i, p in enumerate(prompts):
        with torch.inference_mode():
            ref = model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=int),
                                 do_sample=False, max_new_tokens=MAX_NEW,
                                 pad_token_id=tok.pad_token_id or 0)[0, len(p):].tolist()
        assert got[str(i)]["token_ids"] == ref, QUESTIONS[i]
    assert "Paris" in got["0"]["text"]
