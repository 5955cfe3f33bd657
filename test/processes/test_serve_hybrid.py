"""`mstar serve` on a tiny random Qwen3.5 (hybrid DeltaNet/attention) directory: an OpenAI chat
request gets the tokens transformers generates."""

from __future__ import annotations

import openai
import torch
from serve_helpers import Server
from transformers import AutoModelForCausalLM, AutoTokenizer

MAX_NEW = 16


def test_chat_on_a_hybrid_model_matches_transformers(tiny_model_dir, tmp_path):
    model_dir = tiny_model_dir("qwen3_5")
    messages = [{"role": "user", "content": "Paris is the capital of France. Hello world!"}]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.inference_mode():
        gen = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=MAX_NEW,
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             eos_token_id=None, pad_token_id=0)
    expected = [tokenizer.decode([t]) for t in gen[0, len(prompt):].tolist()]

    server = Server(model_dir, tmp_path / "server.log", env={"MSTAR_DTYPE": "float32"})
    try:
        server.wait_ready(timeout_s=300)  # generous: CI machines may be busy
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                               timeout=60)
        out = client.chat.completions.create(
            model=model_dir.name, messages=messages, max_tokens=MAX_NEW, temperature=0,
            logprobs=True, extra_body={"ignore_eos": True})
    finally:
        server.stop()
    assert out.usage.completion_tokens == MAX_NEW
    # One entry per generated token, each the decoded token; random weights emit partial UTF-8
    # characters too, which show as their own bytes (``bytes:\\xHH``), as OpenAI shows them.
    shown = [entry.token for entry in out.choices[0].logprobs.content]
    assert len(shown) == len(expected)
    for token, text in zip(shown, expected, strict=True):
        assert token.startswith("bytes:") if "\ufffd" in text else token == text
    assert "prefix_caching_off" in server.log()
