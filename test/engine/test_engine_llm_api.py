"""The offline ``LLM`` API: prompt forms, per-prompt params, chat templates."""

from __future__ import annotations

import pytest

from mstar import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(model=str(tiny_model_dir("qwen3")), device="cpu", kv_block_size=4,
               num_kv_blocks=128)


def test_prompt_forms_agree(llm, tiny_tokenizer):
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    text = "Hello world!"
    ids = tiny_tokenizer.encode(text)
    one = llm.generate(text, params)
    many = llm.generate([text, {"prompt_token_ids": ids}], params)
    assert len(one) == 1 and len(many) == 2
    assert one[0].token_ids == many[0].token_ids == many[1].token_ids
    assert one[0].prompt_token_ids == ids
    assert one[0].finish_reason == "length" and len(one[0].token_ids) == 6
    assert one[0].text == tiny_tokenizer.decode(one[0].token_ids, skip_special_tokens=True)


def test_per_prompt_params_and_default(llm):
    out = llm.generate(["a b", "c d"], [SamplingParams(max_tokens=2, ignore_eos=True),
                                       SamplingParams(max_tokens=5, ignore_eos=True)])
    assert [len(o.token_ids) for o in out] == [2, 5]
    with pytest.raises(ValueError, match="sampling_params has 1 entries but there are 2"):
        llm.generate(["a", "b"], [SamplingParams()])
    default = llm.generate("a b")[0]  # greedy, up to 256 tokens
    assert len(default.token_ids) <= 256 and default.finish_reason in ("stop", "length")
    with pytest.raises(TypeError, match="prompt must be"):
        llm.generate([42])


def test_chat_applies_template(llm, tiny_tokenizer):
    conv = [{"role": "user", "content": "Hello"}]
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    single = llm.chat(conv, params)
    batch = llm.chat([conv, [{"role": "user", "content": "Bye"}]], params)
    expected = tiny_tokenizer.apply_chat_template(conv, add_generation_prompt=True,
                                                  tokenize=True, return_dict=False)
    assert single[0].prompt_token_ids == list(expected)
    assert len(batch) == 2 and batch[0].token_ids == single[0].token_ids
