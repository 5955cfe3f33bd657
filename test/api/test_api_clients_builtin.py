"""The Responses API, models.retrieve and Anthropic's Messages API, each used the way its official
client's docs show, against `mstar serve` on the built-in model (the shared server). The protocol
is judged (shapes, event order, ids, a tool round trip), not the 135M model's answers."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

MODEL = "SmolLM2-135M-Instruct"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
           "required": ["city"], "additionalProperties": False}
QUESTION = "What is the weather like in Paris today?"
CALL_TOKENS = 40
ANSWER_TOKENS = 10


@pytest.fixture()
def client(builtin_server):
    return openai.OpenAI(base_url=builtin_server.url + "/v1", api_key="x", max_retries=0,
                         timeout=50)


@pytest.fixture()
def claude(builtin_server):
    return anthropic.Anthropic(base_url=builtin_server.url, api_key="x", max_retries=0,
                               timeout=50)


def test_models_retrieve(client):
    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_responses_create_store_continue_and_delete(client):
    first = client.responses.create(model=MODEL, input="Say hello.", instructions="Be brief.",
                                    max_output_tokens=ANSWER_TOKENS, temperature=0)
    assert first.status in ("completed", "incomplete") and first.output_text.strip()
    assert first.output[0].type == "message" and first.output[0].role == "assistant"
    assert 0 < first.usage.output_tokens <= ANSWER_TOKENS
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    assert client.responses.retrieve(first.id).output_text == first.output_text
    second = client.responses.create(model=MODEL, input="Again.", previous_response_id=first.id,
                                     max_output_tokens=ANSWER_TOKENS, temperature=0)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn came first
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    unstored = client.responses.create(model=MODEL, input="Hi.", store=False,
                                       max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_responses_stream(client):
    events = list(client.responses.create(model=MODEL, input="Say hello.", stream=True,
                                          max_output_tokens=ANSWER_TOKENS, temperature=0))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    final = events[-1].response
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # The SDK's own accumulating helper follows the events (it rebuilds only a completed
    # response: one cut by max_output_tokens ends with response.incomplete, as OpenAI's does).
    with client.responses.stream(model=MODEL, input="Say hello.", temperature=0,
                                 max_output_tokens=ANSWER_TOKENS) as stream:
        seen = list(stream)
        text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
        if seen[-1].type == "response.completed":
            assert stream.get_final_response().output_text == text
    assert text == deltas  # greedy: the same text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streaming"])
def test_responses_function_call_round_trip(client, stream):
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
              "parameters": WEATHER, "strict": True}]
    args = {"model": MODEL, "input": QUESTION, "tools": tools, "tool_choice": "required",
            "max_output_tokens": CALL_TOKENS, "temperature": 0}
    if stream:
        with client.responses.stream(**args) as events:
            kinds = [e.type for e in events]
            first = events.get_final_response()
        assert "response.function_call_arguments.done" in kinds
    else:
        first = client.responses.create(**args)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    answer = client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=tools, temperature=0,
        max_output_tokens=ANSWER_TOKENS,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}])
    assert answer.output_text.strip()


def test_responses_refuse_what_is_not_served(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="hi", tools=[{"type": "web_search"}])
    assert err.value.param == "tools.0.type"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="hi", background=True)
    assert err.value.param == "background"


TOOL = {"name": "get_weather", "description": "The current weather in a city",
        "input_schema": WEATHER}


def _tool_result_turn(message) -> list[dict]:
    uses = [b for b in message.content if b.type == "tool_use"]
    return [{"role": "assistant", "content": [b.model_dump() for b in message.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id,
                                          "content": "18 C and sunny"} for b in uses]}]


def _check_tool_use(message) -> None:
    assert message.stop_reason == "tool_use" and message.role == "assistant"
    [use] = [b for b in message.content if b.type == "tool_use"]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, WEATHER)


def test_anthropic_messages_tool_round_trip(claude):
    question = [{"role": "user", "content": QUESTION}]
    first = claude.messages.create(model=MODEL, max_tokens=CALL_TOKENS, messages=question,
                                   tools=[TOOL], tool_choice={"type": "any"},
                                   extra_body={"temperature": 0, "top_k": 1})
    _check_tool_use(first)
    assert first.usage.output_tokens > 0 and first.usage.input_tokens > 0
    answer = claude.messages.create(model=MODEL, max_tokens=ANSWER_TOKENS, tools=[TOOL],
                                    system="Answer in one sentence.",
                                    messages=question + _tool_result_turn(first))
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert answer.content[0].type == "text" and answer.content[0].text.strip()


def test_anthropic_messages_stream_tool_round_trip(claude):
    question = [{"role": "user", "content": QUESTION}]
    with claude.messages.stream(model=MODEL, max_tokens=CALL_TOKENS, messages=question,
                                tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"}
                                ) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()  # the SDK rebuilds it from the events
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    _check_tool_use(first)
    with claude.messages.stream(model=MODEL, max_tokens=ANSWER_TOKENS, tools=[TOOL],
                                messages=question + _tool_result_turn(first)) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip() and final.content[0].text == text
    assert final.usage.output_tokens <= ANSWER_TOKENS


def test_anthropic_stop_sequence_and_errors(claude):
    message = claude.messages.create(model=MODEL, max_tokens=30,
                                     stop_sequences=[" "], messages=[
                                         {"role": "user", "content": "Write a long sentence."}])
    if message.stop_reason == "stop_sequence":
        assert message.stop_sequence == " "
    else:  # the model ended its turn before any space
        assert message.stop_reason == "end_turn" and " " not in message.content[0].text
    with pytest.raises(anthropic.BadRequestError) as err:
        claude.messages.create(model=MODEL, max_tokens=5, messages=[
            {"role": "user", "content": "hi"}], thinking={"type": "enabled", "budget_tokens": 1024})
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "thinking" in err.value.body["error"]["message"]
