"""The official `openai` client against `mstar serve` on a tiny random model: what a user of the
client sees for the fields of docs/openai_api.rst (unknown fields rejected on this server: the
session's shared api_server of test/conftest.py)."""

from __future__ import annotations

import httpx
import openai
import pytest
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)


def test_an_unknown_model_is_model_not_found(api_client):
    with pytest.raises(openai.NotFoundError) as exc:
        api_client.completions.create(model="gpt-5", prompt="hi", max_tokens=1)
    assert exc.value.code == "model_not_found"
    assert api_client.completions.create(model="gpt-4o-mini", prompt="hi", max_tokens=1).choices


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"best_of": 2}, "best_of"),
    ({"suffix": "end"}, "suffix"),
    ({"extra_body": {"temprature": 0.5}}, "temprature"),
    ({"extra_body": {"guided_regex": "("}}, "guided_regex"),
    ({"max_tokens": 0}, "max_tokens"),
])
def test_completions_refusals_name_the_field(api_client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as exc:
        api_client.completions.create(model="gpt-4o-mini", prompt="hi", **kwargs)
    assert exc.value.param == param


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]},
     "messages.0.content.1"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nosuch"}}}}}},
     "response_format.json_schema.schema"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"logit_bias": {"100000": 5}}, "logit_bias.100000"),
])
def test_chat_refusals_name_the_field(api_client, kwargs, param):
    kwargs = {"messages": [{"role": "user", "content": "hi"}], **kwargs}
    with pytest.raises(openai.BadRequestError) as exc:
        api_client.chat.completions.create(model="gpt-4o-mini", max_tokens=2, **kwargs)
    assert exc.value.param == param


def test_a_batch_of_prompts_with_n_and_echo(api_client):
    out = api_client.completions.create(model="gpt-4o-mini", prompt=["The quick", "Paris is"], n=2,
                                    max_tokens=3, temperature=0, echo=True,
                                    extra_body={"ignore_eos": True})
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    prompts = ["The quick"] * 2 + ["Paris is"] * 2
    assert all(c.text.startswith(p) and len(c.text) > len(p) for c, p in zip(out.choices, prompts,
                                                                         strict=True))
    assert out.choices[0].text == out.choices[1].text  # greedy
    assert out.usage.completion_tokens == 12


def test_accepted_fields_answer(api_client):
    out = api_client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_completion_tokens=3,
        user="u-1", presence_penalty=0.5, frequency_penalty=0.5, store=False, metadata={"a": "b"},
        extra_body={"min_tokens": 3, "stop_token_ids": [5], "ignore_eos": True})
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 3


def test_tokenize_round_trip(api_server):
    ids = httpx.post(api_server.url + "/tokenize", json={"prompt": "Hello world!"},
                     headers=api_server.headers).json()["tokens"]
    text = httpx.post(api_server.url + "/detokenize", json={"tokens": ids},
                      headers=api_server.headers).json()["prompt"]
    assert text == "Hello world!"
