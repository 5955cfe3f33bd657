"""POST /v1/messages (Anthropic's Messages API) on the API server in process with a stub engine
(every request gets the text "aaa" in up to 3 tokens): the translation into a chat prompt, the
message and the typed event sequence, tool_use blocks, stop reasons, x-api-key, and errors in
Anthropic's shape naming the field."""

from __future__ import annotations

import pytest
from api_stub import STUB_MODEL, sse_events, stub_app
from starlette.testclient import TestClient

from mstar.api_server.anthropic.output import ContentBlocks
from mstar.api_server.anthropic.protocol import MessagesRequest
from mstar.api_server.anthropic.routes import matched_stop, stop_reason
from mstar.api_server.anthropic.translate import to_chat
from mstar.api_server.tools.parsers.calls import ToolCall

TOOL = {"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
BASE = {"model": STUB_MODEL, "max_tokens": 3}


@pytest.fixture
def stub(tiny_tokenizer):
    app, engine = stub_app(tiny_tokenizer)
    return TestClient(app), engine, tiny_tokenizer



def test_system_and_messages_become_the_chat_prompt(stub):
    client, engine, tok = stub
    resp = client.post("/v1/messages", json={
        **BASE, "system": "Be brief.", "messages": [{"role": "user", "content": "hello there"}],
        "temperature": 0.5, "top_p": 0.9, "top_k": 7, "stop_sequences": ["zz"]})
    assert resp.status_code == 200, resp.text
    prompt = tok.decode(engine.submitted[-1][1])
    assert prompt.index("Be brief.") < prompt.index("hello there")
    params = engine.submitted[-1][2]
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k, params.stop) == (
        3, 0.5, 0.9, 7, ["zz"])
    body = resp.json()
    assert body["type"] == "message" and body["role"] == "assistant" and body["id"].startswith("msg_")
    assert body["content"] == [{"type": "text", "text": "aaa"}]
    assert body["stop_reason"] == "max_tokens" and body["stop_sequence"] is None
    usage = body["usage"]
    assert usage["output_tokens"] == 3
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == len(engine.submitted[-1][1])


def test_tool_use_and_tool_result_blocks_become_tool_turns():
    req = MessagesRequest.model_validate({**BASE, "tools": [TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1",
             "content": [{"type": "text", "text": "18 C"}]},
            {"type": "text", "text": "And tomorrow?"}]}],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}})
    chat = to_chat(req)
    messages = chat.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[1]["content"] == "Let me look."
    assert messages[1]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                        "arguments": '{"city": "Paris"}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "t1", "content": "18 C"}
    assert chat.origins == ["messages.0", "messages.1", "messages.2.content.0",
                            "messages.2.content.1"]
    assert chat.body["tools"][0]["function"]["parameters"] == TOOL["input_schema"]
    assert chat.body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat.body["parallel_tool_calls"] is False
    assert chat.original_param("tools.0.function.parameters") == "tools.0.input_schema"
    assert chat.original_param("stop.0") == "stop_sequences.0"


def test_the_stream_is_the_typed_event_sequence(stub):
    client, _, _ = stub
    resp = client.post("/v1/messages", json={**BASE, "stream": True,
                                             "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp)
    assert all(kind == data["type"] for kind, data in events)
    kinds = [kind for kind, _ in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    text = "".join(d["delta"]["text"] for k, d in events if k == "content_block_delta")
    assert text == "aaa"
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert delta["usage"] == {"output_tokens": 3}


def test_a_call_is_a_tool_use_block_and_its_input_streams_as_json():
    blocks = ContentBlocks()
    events = blocks.text("Checking.") + blocks.call(ToolCall("get_weather", '{"city": "Paris"}'))
    events += blocks.close()
    assert [k for k, _ in events] == [
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop"]
    assert events[3][1]["content_block"]["input"] == {}  # filled by the deltas, as Anthropic does
    assert events[4][1]["delta"] == {"type": "input_json_delta",
                                     "partial_json": '{"city": "Paris"}'}
    assert blocks.blocks[1]["type"] == "tool_use" and blocks.blocks[1]["id"].startswith("toolu_")
    assert blocks.blocks[1]["input"] == {"city": "Paris"}


def test_stop_reasons():
    assert stop_reason("length", True, None) == "max_tokens"
    assert stop_reason("stop", True, None) == "tool_use"
    assert stop_reason("stop", False, "END") == "stop_sequence"
    assert stop_reason("stop", False, None) == "end_turn"


def test_the_stop_sequence_that_ended_the_output_is_named(tiny_tokenizer):
    ids = tiny_tokenizer.encode("the cat sat", add_special_tokens=False)
    assert matched_stop(tiny_tokenizer, ids, ["sat", "cat"]) == "cat"
    assert matched_stop(tiny_tokenizer, ids, ["dog"]) is None
    assert matched_stop(tiny_tokenizer, ids, []) is None


def test_x_api_key_and_bearer_both_authenticate(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer, api_key="sk-test")
    client = TestClient(app)
    body = {**BASE, "messages": [{"role": "user", "content": "hi"}]}
    assert client.post("/v1/messages", json=body, headers={"x-api-key": "sk-test"}
                       ).status_code == 200
    assert client.post("/v1/messages", json=body, headers={"Authorization": "Bearer sk-test"}
                       ).status_code == 200
    assert client.get("/v1/models", headers={"x-api-key": "sk-test"}).status_code == 200
    denied = client.post("/v1/messages", json=body, headers={"x-api-key": "wrong"})
    assert denied.status_code == 401
    assert denied.json()["type"] == "error"
    assert denied.json()["error"]["type"] == "authentication_error"
    assert client.get("/v1/models", headers={"x-api-key": "wrong"}).json()["error"]["type"] == \
        "authentication_error"  # OpenAI's shape elsewhere


@pytest.mark.parametrize(("fragment", "param"), [
    ({"max_tokens": "5"}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({"tools": [{"name": "f", "input_schema": {"type": "nosuch"}}]}, "tools.0.input_schema"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]},
     "messages.1.content.0.id"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]},
     "messages.0.content.0"),
    ({"tool_choice": {"type": "tool"}, "tools": [TOOL]}, "tool_choice.name"),
    ({"tool_choice": {"type": "tool", "name": "nope"}, "tools": [TOOL]}, "tool_choice.name"),
    ({"model": "other"}, "model"),
])
def test_errors_are_in_anthropics_shape_and_name_the_field(stub, fragment, param):
    client, _, _ = stub
    resp = client.post("/v1/messages", json={
        **BASE, "messages": [{"role": "user", "content": "hi"}], **fragment})
    assert resp.status_code in (400, 404), resp.text
    body = resp.json()
    assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}
    assert body["error"]["type"] in ("invalid_request_error", "not_found_error")
    assert body["error"]["param"] == param, body


def test_thinking_text_is_a_thinking_block_before_the_text():
    """The hook a reasoning parser feeds."""
    blocks = ContentBlocks()
    events = blocks.thinking("Hm") + blocks.thinking("m.") + blocks.text("Yes.") + blocks.close()
    assert [(k, d.get("delta", {}).get("type")) for k, d in events] == [
        ("content_block_start", None), ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "thinking_delta"), ("content_block_stop", None),
        ("content_block_start", None), ("content_block_delta", "text_delta"),
        ("content_block_stop", None)]
    assert blocks.blocks == [{"type": "thinking", "thinking": "Hmm.", "signature": ""},
                             {"type": "text", "text": "Yes."}]


def test_unknown_paths_under_messages_answer_in_anthropics_shape(stub):
    client, _, _ = stub
    resp = client.post("/v1/messages/batches", json={})
    assert resp.status_code == 404 and resp.json()["type"] == "error"
    assert resp.json()["error"]["message"] == \
        "/v1/messages/batches is not served; see /openapi.json"
