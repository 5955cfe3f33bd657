"""POST /v1/responses and the response store, on the API server in process with a stub engine
(every request gets the text "aaa" in up to 3 tokens): the translation into a chat prompt, the
object and the typed event sequence, the store (TTL, capacity, per-key isolation) and the fields
refused by name."""

from __future__ import annotations

import pytest
from api_stub import STUB_MODEL, sse_events, stub_app
from starlette.testclient import TestClient

from mstar.api_server.responses.protocol import InputItem, ResponsesRequest
from mstar.api_server.responses.store import ResponseStore, StoredResponse, owner_of
from mstar.api_server.responses.translate import to_chat

TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.fixture
def stub(tiny_tokenizer):
    app, engine = stub_app(tiny_tokenizer)
    return TestClient(app), engine, tiny_tokenizer


def _prompt(engine, tokenizer) -> str:
    return tokenizer.decode(engine.submitted[-1][1])



def test_text_input_and_instructions_become_the_chat_prompt(stub):
    client, engine, tok = stub
    resp = client.post("/v1/responses", json={"input": "hello there", "instructions": "Be brief.",
                                              "max_output_tokens": 3, "temperature": 0.5,
                                              "top_p": 0.9})
    assert resp.status_code == 200, resp.text
    prompt = _prompt(engine, tok)
    assert prompt.index("Be brief.") < prompt.index("hello there")
    params = engine.submitted[-1][2]
    assert (params.max_tokens, params.temperature, params.top_p) == (3, 0.5, 0.9)
    body = resp.json()
    assert body["object"] == "response" and body["id"].startswith("resp_")
    assert body["status"] == "incomplete"  # the stub always stops at its length
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant"
    assert message["content"][0] == {"type": "output_text", "text": "aaa", "annotations": [],
                                     "logprobs": []}
    usage = body["usage"]
    assert usage["output_tokens"] == 3
    assert usage["input_tokens"] == len(engine.submitted[-1][1])
    assert usage["total_tokens"] == usage["input_tokens"] + 3


def test_function_calls_and_outputs_become_tool_turns():
    req = ResponsesRequest.model_validate({"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city": "Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        {"type": "function_call_output", "call_id": "c2", "output": "25 C"},
        {"type": "reasoning", "id": "rs_1", "summary": []}],
        "tools": [TOOL], "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
        "max_output_tokens": 7})
    chat = to_chat(req, [])
    messages = chat.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1", "c2"]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "18 C"}
    assert chat.origins == ["input.0", "input.1", "input.3", "input.4"]
    assert chat.body["tools"][0]["function"]["strict"] is True  # the Responses API's default
    assert chat.body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat.body["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert chat.body["max_completion_tokens"] == 7
    assert chat.original_param("tools.0.function.parameters") == "tools.0.parameters"
    assert chat.original_param("messages.2.content") == "input.3"
    assert chat.original_param("response_format.json_schema.schema") == "text.format.schema"


def test_the_stream_is_the_typed_event_sequence(stub):
    client, _, _ = stub
    resp = client.post("/v1/responses", json={"input": "hi", "stream": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = sse_events(resp)
    kinds = [k for k, _ in events]
    assert all(k == data["type"] for k, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    deltas = [data["delta"] for k, data in events if k == "response.output_text.delta"]
    final = events[-1][1]["response"]
    assert "".join(deltas) == final["output"][0]["content"][0]["text"] == "aaa"
    assert events[0][1]["response"]["status"] == "in_progress"
    assert final["usage"]["output_tokens"] == 3


def test_a_stored_response_is_read_continued_and_deleted(stub):
    client, engine, tok = stub
    first = client.post("/v1/responses", json={"input": "first question"}).json()
    assert client.get(f"/v1/responses/{first['id']}").json() == first
    client.post("/v1/responses", json={"input": "second question",
                                       "previous_response_id": first["id"]})
    prompt = _prompt(engine, tok)
    assert prompt.index("first question") < prompt.index("aaa") < prompt.index("second question")
    deleted = client.delete(f"/v1/responses/{first['id']}")
    assert deleted.json() == {"id": first["id"], "object": "response.deleted", "deleted": True}
    assert client.get(f"/v1/responses/{first['id']}").status_code == 404
    again = client.post("/v1/responses", json={"input": "x", "previous_response_id": first["id"]})
    assert again.status_code == 404 and again.json()["error"]["param"] == "previous_response_id"


def test_nothing_is_stored_when_store_is_false(stub):
    client, _, _ = stub
    body = client.post("/v1/responses", json={"input": "hi", "store": False}).json()
    assert body["store"] is False
    assert client.get(f"/v1/responses/{body['id']}").status_code == 404
    assert len(client.app.state.response_store) == 0


def test_stored_responses_are_isolated_per_api_key(stub):
    client, _, _ = stub
    mine = {"Authorization": "Bearer key-a"}
    body = client.post("/v1/responses", json={"input": "hi"}, headers=mine).json()
    assert client.get(f"/v1/responses/{body['id']}", headers=mine).status_code == 200
    assert client.get(f"/v1/responses/{body['id']}", headers={"x-api-key": "key-a"}
                      ).status_code == 200
    for other in ({"Authorization": "Bearer key-b"}, {}):
        assert client.get(f"/v1/responses/{body['id']}", headers=other).status_code == 404
        assert client.delete(f"/v1/responses/{body['id']}", headers=other).status_code == 404


def test_without_isolation_every_client_sees_every_response(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer, responses_store_per_key=False)
    client = TestClient(app)
    body = client.post("/v1/responses", json={"input": "hi"},
                       headers={"Authorization": "Bearer key-a"}).json()
    assert client.get(f"/v1/responses/{body['id']}").status_code == 200


def test_the_store_expires_after_its_ttl_and_keeps_its_capacity():
    now = [0.0]
    store = ResponseStore(capacity=2, ttl_s=10.0, timer=lambda: now[0])
    entry = StoredResponse({"id": "r"}, [InputItem(role="user", content="x")])
    store.put("a", "r1", entry)
    store.put("a", "r2", entry)
    store.put("a", "r3", entry)  # over capacity: the least recently used (r1) goes
    assert store.get("a", "r1") is None and store.get("a", "r3") is entry
    assert store.get("b", "r3") is None  # another owner
    now[0] = 10.5
    assert store.get("a", "r3") is None and len(store) == 0


def test_a_zero_capacity_store_keeps_nothing():
    store = ResponseStore(capacity=0, ttl_s=10.0)
    store.put("a", "r", StoredResponse({}, []))
    assert store.get("a", "r") is None and not store.delete("a", "r")


def test_owners_are_key_digests():
    assert owner_of(b"k", per_key=True) != owner_of(b"j", per_key=True)
    assert b"k".hex() not in owner_of(b"k", per_key=True)
    assert owner_of(b"k", per_key=False) == owner_of(None, per_key=True)


@pytest.mark.parametrize(("fragment", "param"), [
    ({"background": True}, "background"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools.0.type"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"conversation": "conv_1"}, "conversation"),
    ({"include": ["message.output_text.logprobs"]}, "include.0"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input.0.content.0"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
    ({"tools": [{**TOOL, "parameters": {"type": "nosuch"}}]}, "tools.0.parameters"),
    ({"text": {"format": {"type": "json_schema", "schema": {"type": "nosuch"}}}},
     "text.format.schema"),
    ({"max_output_tokens": 5000}, "max_output_tokens"),
    ({"model": "other"}, "model"),
    ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice.name"),
])
def test_what_is_not_served_is_refused_by_name(stub, fragment, param):
    client, _, _ = stub
    resp = client.post("/v1/responses", json={"input": "hi", **fragment})
    assert resp.status_code in (400, 404), resp.text
    assert resp.json()["error"]["param"] == param, resp.json()


def test_models_retrieve_and_unknown_paths(stub):
    client, _, _ = stub
    card = client.get(f"/v1/models/{STUB_MODEL}").json()
    assert card["id"] == STUB_MODEL and card["object"] == "model"
    missing = client.get("/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    unknown = client.post("/v1/foo", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "/v1/foo is not served; see /openapi.json"


def test_reasoning_text_is_a_reasoning_item_before_the_message():
    """The hook a reasoning parser feeds."""
    from mstar.api_server.responses.output import OutputItems

    items = OutputItems()
    events = items.reasoning("Hm") + items.reasoning("m.") + items.text("Yes.")
    events += items.close("completed")
    kinds = [e["type"] for e in events]
    assert kinds == ["response.output_item.added", "response.reasoning_text.delta",
                     "response.reasoning_text.delta", "response.reasoning_text.done",
                     "response.output_item.done", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta",
                     "response.output_text.done", "response.content_part.done",
                     "response.output_item.done"]
    reasoning, message = items.items
    assert reasoning["type"] == "reasoning" and reasoning["content"] == [
        {"type": "reasoning_text", "text": "Hmm."}]
    assert message["content"][0]["text"] == "Yes." and events[5]["output_index"] == 1
