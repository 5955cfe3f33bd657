"""Tool calling end to end: the official openai client against `mstar serve` on the built-in model.

A round trip (streaming and not): tools with tool_choice required / a named function -> a call
whose arguments validate against the function's schema -> the call and its result sent back ->
an ordinary answer. Forcing a call needs the engine's grammar mask;
those tests skip where it is not there yet.
"""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER,
                                           "description": "The current weather in a city"}},
         {"type": "function", "function": {"name": "get_time", "description": "The time now"}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": {"type": "object"}}
QUESTION = [{"role": "user", "content": "What is the weather like in Paris today?"}]
CALL_TOKENS = 48  # room for a call; answers are only checked to be there
ANSWER_TOKENS = 12


@pytest.fixture()
def client(builtin_server):
    return openai.OpenAI(base_url=builtin_server.url + "/v1", api_key="x", max_retries=0,
                         timeout=50)


def ask(client, messages: list, stream: bool, **fields) -> tuple[str | None, list[dict], str]:
    """(content, tool calls as {id, name, arguments}, finish_reason) of one greedy reply."""
    args = {"model": "SmolLM2-135M-Instruct", "messages": messages, "tools": TOOLS,
            "temperature": 0, "max_tokens": CALL_TOKENS} | fields
    if not stream:
        choice = client.chat.completions.create(**args).choices[0]
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    content, calls, finish = None, {}, None
    for chunk in client.chat.completions.create(**args, stream=True):
        delta = chunk.choices[0].delta
        if delta.content:
            content = (content or "") + delta.content
        for tc in delta.tool_calls or []:
            if tc.index not in calls:  # the first delta of a call names it, with no arguments yet
                assert tc.id.startswith("call_") and tc.type == "function"
                assert tc.function.name and tc.function.arguments == ""
                calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert "<tool_call>" not in (content or "")
    return content, [calls[i] for i in sorted(calls)], finish


def answer_turn(calls: list[dict]) -> list[dict]:
    """The assistant's calls and a result for each, as a client sends them back."""
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}
    results = [{"role": "tool", "tool_call_id": c["id"], "content": "18 degrees and sunny"}
               for c in calls]
    return [assistant, *results]


def assert_plain_answer(content: str | None, calls: list, finish: str) -> None:
    assert calls == [] and finish in ("stop", "length")
    assert isinstance(content, str) and content.strip()


@pytest.mark.parametrize("stream, tool_choice", [
    (False, "required"),
    (True, {"type": "function", "function": {"name": "get_weather"}}),
], ids=["required", "named-streaming"])
def test_round_trip_call_result_answer(client, stream, tool_choice):
    pytest.importorskip("mstar.engine.structured.structured_output")
    content, calls, finish = ask(client, QUESTION, stream, tool_choice=tool_choice)
    assert finish == "tool_calls" and content is None and calls
    for call in calls:
        assert call["id"].startswith("call_") and call["name"] in SCHEMAS
        jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    if isinstance(tool_choice, dict):
        assert [c["name"] for c in calls] == ["get_weather"]

    assert_plain_answer(*ask(client, QUESTION + answer_turn(calls), stream,
                             max_tokens=ANSWER_TOKENS))


def test_a_tool_result_is_answered(client):
    calls = [{"id": "call_1", "name": "get_weather",
              "arguments": '{"city": "Paris", "unit": "celsius"}'}]
    assert_plain_answer(*ask(client, QUESTION + answer_turn(calls), False,
                             max_tokens=ANSWER_TOKENS))


def test_tool_choice_none_answers_without_calls(client):
    content, calls, finish = ask(client, QUESTION, True, tool_choice="none",
                                 max_tokens=ANSWER_TOKENS)
    assert_plain_answer(content, calls, finish)


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required", "tools": openai.NOT_GIVEN}, "tool_choice"),
    ({"tool_choice": {"type": "function", "function": {"name": "get_news"}}},
     "tool_choice.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]},
     "tools.0.function.parameters"),
    ({"messages": QUESTION + [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]},
     "messages.1.tool_call_id"),
])
def test_bad_tool_requests_are_a_400_naming_the_field(client, fields, param):
    args = {"model": "SmolLM2-135M-Instruct", "messages": QUESTION, "tools": TOOLS,
            "max_tokens": 4, **fields}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(**args)
    assert err.value.param == param


class Weather(BaseModel):
    city: str = Field(max_length=40)
    unit: Literal["celsius", "fahrenheit"]


class Answer(BaseModel):
    sunny: bool


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_strict_tool_and_a_response_format_together(client, tool_choice):
    """openai-python's ``parse(tools=[pydantic_function_tool(...)], response_format=Model)``, the
    default of openai-agents and pydantic-ai: a call, or the answer in the format."""
    reply = client.chat.completions.parse(
        model="SmolLM2-135M-Instruct", messages=QUESTION, temperature=0, max_tokens=80,
        tools=[openai.pydantic_function_tool(Weather)], tool_choice=tool_choice,
        response_format=Answer)
    choice = reply.choices[0]
    if tool_choice == "required" or choice.finish_reason == "tool_calls":
        assert choice.finish_reason == "tool_calls"
        assert isinstance(choice.message.tool_calls[0].function.parsed_arguments, Weather)
    else:
        assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, Answer)
