"""Reasoning end to end: ``mstar serve`` on a tiny random Qwen3 whose chat template thinks
(Qwen3's enable_thinking switch). The random model's words are junk; what is checked is the shape
of the replies, that stream and non-stream agree, and that constrained answers (response_format,
tools) follow their grammar after the reasoning."""

from __future__ import annotations

import json
import shutil

import openai
import pytest
from serve_helpers import running_server
from test_reasoning import QWEN3_TEMPLATE

SCHEMA = {"type": "object", "properties": {"ok": {"enum": ["yes", "no"]}}, "required": ["ok"],
          "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "ok", "schema": SCHEMA}}
MESSAGES = [{"role": "user", "content": "Is it sunny?"}]


@pytest.fixture(scope="module")
def server(tiny_model_dir, tiny_tokenizer, tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen3-thinking")
    shutil.copytree(tiny_model_dir("qwen3"), path, dirs_exist_ok=True)
    tokenizer = tiny_tokenizer.__class__.from_pretrained(path)
    tokenizer.chat_template = QWEN3_TEMPLATE
    tokenizer.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = 2048  # room for the tools prompt of a 400-token vocabulary
    (path / "config.json").write_text(json.dumps(config))
    yield from running_server(path, tmp_path_factory.mktemp("serve") / "server.log",
                              {"MSTAR_DTYPE": "float32", "MSTAR_SERVED_MODEL_NAMES": "m"})


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def ask(client, stream: bool, **fields) -> tuple[str | None, str, str]:
    """(reasoning_content, content, finish_reason) of a greedy reply."""
    args = {"model": "m", "messages": MESSAGES, "temperature": 0, "max_tokens": 40, **fields}
    if not stream:
        choice = client.chat.completions.create(**args).choices[0]
        message = choice.message.model_dump()
        assert "reasoning_content" in message
        return message["reasoning_content"], message["content"] or "", choice.finish_reason
    reasoning, content, finish = "", "", None
    for chunk in client.chat.completions.create(**args, stream=True):
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            reasoning += delta.get("reasoning_content") or ""
            content += delta.get("content") or ""
            finish = choice.finish_reason or finish
    return reasoning or None, content, finish


def test_stream_and_non_stream_split_the_same_reply(client):
    assert ask(client, True) == ask(client, False)


@pytest.mark.parametrize("thinking", [None, False])
def test_a_response_format_answer_follows_the_schema_after_the_reasoning(client, thinking):
    extra = {} if thinking is None else {"extra_body": {"chat_template_kwargs":
                                                        {"enable_thinking": thinking}}}
    reasoning, content, finish = ask(client, False, response_format=FORMAT, max_tokens=60,
                                     **extra)
    if thinking is False:
        assert reasoning is None
    if finish == "stop":
        assert json.loads(content)["ok"] in ("yes", "no")
    else:  # cut while thinking: all of it is reasoning
        assert finish == "length" and content == "" and reasoning


def test_a_tool_and_response_format_together_are_answered(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "strict": True,
                                                "parameters": SCHEMA}}]
    reply = client.chat.completions.create(
        model="m", messages=MESSAGES, temperature=0, max_tokens=150, tools=tools,
        parallel_tool_calls=False, response_format=FORMAT,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    message = reply.choices[0].message
    if reply.choices[0].finish_reason == "tool_calls":
        assert json.loads(message.tool_calls[0].function.arguments)["ok"] in ("yes", "no")
    else:  # the grammar allows nothing else, and both are short
        assert reply.choices[0].finish_reason == "stop"
        assert json.loads(message.content)["ok"] in ("yes", "no")


def test_responses_and_messages_show_the_reasoning_chat_shows(client, server):
    """The Responses API's reasoning item and Anthropic's thinking block hold what chat returns
    as reasoning_content (the same greedy reply), before the answer."""
    import anthropic

    reasoning, content, _ = ask(client, False)
    response = client.responses.create(model="m", input=MESSAGES[0]["content"], temperature=0,
                                       max_output_tokens=40)
    kinds = [item.type for item in response.output]
    shown = [item.content[0].text for item in response.output if item.type == "reasoning"]
    assert shown == ([reasoning] if reasoning else []) and kinds[0] == kinds_first(reasoning)
    assert response.output_text == content
    message = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0).messages.create(
        model="m", max_tokens=40, messages=MESSAGES, extra_body={"temperature": 0})
    thinking = [block.thinking for block in message.content if block.type == "thinking"]
    assert thinking == ([reasoning] if reasoning else [])
    assert "".join(b.text for b in message.content if b.type == "text") == content


def kinds_first(reasoning: str | None) -> str:
    return "reasoning" if reasoning else "message"
