"""The request rules the field table cannot show, on the API server in process with a stub
engine: unknown fields, batches, echo, what reaches the engine, model names, tokenize."""

from __future__ import annotations

import json

import pytest
from api_stub import STUB_MAX_MODEL_LEN, STUB_MODEL, stub_app
from starlette.testclient import TestClient
from structlog.testing import capture_logs

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _client(tokenizer, **settings):
    app, engine = stub_app(tokenizer, **settings)
    return TestClient(app), engine


@pytest.fixture(scope="module")
def stub(tiny_tokenizer):
    return _client(tiny_tokenizer)


def _error(resp) -> dict:
    assert resp.status_code == 400, resp.text
    return resp.json()["error"]


def test_unknown_fields_warn_once_and_are_listed_in_a_header(tiny_tokenizer):
    client, _ = _client(tiny_tokenizer)  # default: warn
    body = {**CHAT, "temprature": 0.5, "stream_options": {"include_usge": True}, "stream": True}
    with capture_logs() as logs:
        first = client.post("/v1/chat/completions", json=body)
        again = client.post("/v1/chat/completions", json=body)
    assert first.status_code == again.status_code == 200
    assert first.headers["x-mstar-ignored-fields"] == "temprature,stream_options.include_usge"
    warned = [e["field"] for e in logs if e["event"] == "unknown_request_field_ignored"]
    assert warned == ["temprature", "stream_options.include_usge"]  # once per name


def test_unknown_fields_rejected_with_a_suggestion(tiny_tokenizer):
    client, _ = _client(tiny_tokenizer, unknown_request_fields="reject")
    error = _error(client.post("/v1/completions", json={"prompt": "x", "max_tokns": 3,
                                                        "foo": 1}))
    assert error["param"] == "max_tokns"
    assert "did you mean 'max_tokens'" in error["message"] and "'foo'" in error["message"]
    nested = _error(client.post("/v1/chat/completions", json={
        **CHAT, "messages": [{"role": "user", "content": "x", "contnt": "y"}]}))
    assert nested["param"] == "messages.0.contnt" and "messages.0.content" in nested["message"]


def test_unknown_fields_ignored_silently(tiny_tokenizer):
    client, _ = _client(tiny_tokenizer, unknown_request_fields="ignore")
    resp = client.post("/v1/completions", json={"prompt": "x", "foo": 1})
    assert resp.status_code == 200 and "x-mstar-ignored-fields" not in resp.headers


def test_a_batch_of_prompts_gets_n_choices_each_in_order(stub):
    client, engine = stub
    engine.submitted.clear()
    resp = client.post("/v1/completions", json={"prompt": [[5, 6], [7]], "n": 2, "max_tokens": 1,
                                                "echo": True})
    body = resp.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert [ids for _, ids, _ in engine.submitted] == [[5, 6], [5, 6], [7], [7]]
    decoded = [client.post("/detokenize", json={"tokens": t}).json()["prompt"]
               for t in ([5, 6], [7])]
    assert [c["text"] for c in body["choices"]] == [decoded[0] + "a"] * 2 + [decoded[1] + "a"] * 2
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 4


def test_echo_streams_the_prompt_first(stub):
    client, _ = stub
    resp = client.post("/v1/completions", json={"prompt": "hi", "echo": True, "stream": True,
                                                "max_tokens": 2})
    events = [json.loads(line[6:]) for line in resp.text.split("\n\n")
              if line.startswith("data: {")]
    assert "".join(e["choices"][0]["text"] for e in events) == "hiaa"


def test_sampling_fields_reach_the_engine(stub):
    client, engine = stub
    engine.submitted.clear()
    resp = client.post("/generate", json={
        "prompt": "hi", "stream": False, "max_tokens": 4, "min_tokens": 2,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "logit_bias": {"7": -100},
        "stop_token_ids": [9], "guided_choice": ["yes", "no"]})
    assert resp.status_code == 200, resp.text
    params = engine.submitted[0][2]
    assert (params.min_tokens, params.presence_penalty, params.frequency_penalty) == (2, 0.5, -0.5)
    assert params.logit_bias == {7: -100.0} and params.stop_token_ids == [9]
    assert params.structured_output.kind == "choice"
    assert params.structured_output.choices == ["yes", "no"]


def test_response_format_json_schema_becomes_the_constraint(stub):
    client, engine = stub
    engine.submitted.clear()
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    resp = client.post("/v1/chat/completions", json={**CHAT, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
    assert resp.status_code == 200
    constraint = engine.submitted[0][2].structured_output
    assert constraint.kind == "json_schema" and json.loads(constraint.spec) == schema


@pytest.mark.parametrize(("body", "param"), [
    ({"logit_bias": {"999999": 1}}, "logit_bias.999999"),
    ({"logit_bias": {"a": 1}}, "logit_bias.a"),
    ({"stop_token_ids": [5, 999999]}, "stop_token_ids.1"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a+"}, "guided_regex"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"logprobs": 2, "echo": True}, "echo"),
    ({"prompt": ["a", 5]}, "prompt.1"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": ["a", ""]}, "prompt.1"),
])
def test_bad_values_name_their_field(stub, body, param):
    client, _ = stub
    assert _error(client.post("/v1/completions", json={"prompt": "hi", **body}))["param"] == param


@pytest.mark.parametrize("raw", ['"temperature": NaN', '"temperature": Infinity',
                                 '"repetition_penalty": 1e309', '"top_p": -Infinity'])
def test_nan_and_infinity_are_refused(stub, raw):
    client, _ = stub
    resp = client.post("/v1/completions", content='{"prompt": "hi", ' + raw + "}")
    assert _error(resp)["param"] == raw.split('"')[1]


def test_a_form_encoded_json_body_is_still_read_as_json(stub):
    client, _ = stub  # curl -d sends application/x-www-form-urlencoded
    resp = client.post("/v1/completions", content='{"prompt": "hi", "max_tokens": 1}',
                       headers={"content-type": "application/x-www-form-urlencoded"})
    assert resp.status_code == 200, resp.text


def test_aliases_serve_and_are_listed_with_max_model_len(tiny_tokenizer):
    client, _ = _client(tiny_tokenizer, served_model_names="gpt-4o-mini, default")
    listed = client.get("/v1/models").json()["data"]
    assert [card["id"] for card in listed] == [STUB_MODEL, "gpt-4o-mini", "default"]
    assert all(card["max_model_len"] == STUB_MAX_MODEL_LEN for card in listed)
    for name in (STUB_MODEL, "gpt-4o-mini", "default"):
        assert client.post("/v1/completions", json={"prompt": "x", "model": name}).status_code == 200
    missing = client.post("/v1/completions", json={"prompt": "x", "model": "gpt-5"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


def test_tokenize_and_detokenize_in_vllms_shape(stub, tiny_tokenizer):
    client, _ = stub
    out = client.post("/tokenize", json={"prompt": "Hello world!", "return_token_strs": True}).json()
    assert out["tokens"] == tiny_tokenizer.encode("Hello world!")
    assert out["count"] == len(out["tokens"]) and out["max_model_len"] == STUB_MAX_MODEL_LEN
    assert out["token_strs"] == tiny_tokenizer.convert_ids_to_tokens(out["tokens"])
    back = client.post("/detokenize", json={"tokens": out["tokens"]}).json()
    assert back == {"prompt": "Hello world!"}
    chat = client.post("/tokenize", json={"messages": CHAT["messages"]}).json()
    text = tiny_tokenizer.apply_chat_template(CHAT["messages"], tokenize=False,
                                              add_generation_prompt=True)
    assert chat["tokens"] == tiny_tokenizer.encode(text, add_special_tokens=False)
    assert _error(client.post("/tokenize", json={}))["param"] == "prompt"
    assert _error(client.post("/detokenize", json={"tokens": [0, 10**6]}))["param"] == "tokens.1"
