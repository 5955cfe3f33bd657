"""One bounds check per limit, on every route (issue 33): every route of /openapi.json that takes
a bounded list (stop strings, logit_bias entries, tools, messages, embedding inputs), by its own
name for it, gets the same 400 naming that field past the limit, and a route that renders text
gets the same 413 past MSTAR_MAX_PROMPT_CHARS. In process, on the stub engine."""

from __future__ import annotations

import pytest
from api_stub import STUB_MODEL, stub_app

MOST = 2  # every count limit, for the test
LIMITS = {"max_stop_strings": MOST, "max_logit_bias_entries": MOST, "max_tools": MOST,
          "max_messages": MOST, "embedding_max_inputs": MOST}
# A route's own name for a bounded list -> the knob its 400 names (``input``: by route).
KNOBS = {"stop": "MSTAR_MAX_STOP_STRINGS", "stop_sequences": "MSTAR_MAX_STOP_STRINGS",
         "logit_bias": "MSTAR_MAX_LOGIT_BIAS_ENTRIES", "tools": "MSTAR_MAX_TOOLS",
         "messages": "MSTAR_MAX_MESSAGES"}
INPUT_KNOBS = {"/v1/responses": "MSTAR_MAX_MESSAGES", "/v1/embeddings": "MSTAR_EMBEDDING_MAX_INPUTS"}

USER = {"role": "user", "content": "hi"}
CHAT_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
# A valid body per route, with one entry in each bounded list the route takes: the over-limit
# body repeats that entry. A route that takes a bounded field must be here (the walk asserts it).
BODIES = {
    "/v1/chat/completions": {"model": STUB_MODEL, "messages": [USER], "max_tokens": 2,
                             "stop": ["x"], "logit_bias": {"5": 1.0}, "tools": [CHAT_TOOL]},
    "/v1/completions": {"model": STUB_MODEL, "prompt": "hi", "max_tokens": 2, "stop": ["x"],
                        "logit_bias": {"5": 1.0}},
    "/generate": {"prompt": "hi", "max_tokens": 2, "stop": ["x"], "logit_bias": {"5": 1.0}},
    "/v1/messages": {"model": STUB_MODEL, "messages": [USER], "max_tokens": 2,
                     "stop_sequences": ["x"],
                     "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
    "/v1/responses": {"model": STUB_MODEL, "input": [USER], "max_output_tokens": 2,
                      "tools": [{"type": "function", "name": "f"}]},
    "/v1/messages/count_tokens": {"model": STUB_MODEL, "messages": [USER], "max_tokens": 2,
                                  "stop_sequences": ["x"],
                                  "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
    "/v1/embeddings": {"model": STUB_MODEL, "input": ["hi"]},
    "/tokenize": {"messages": [USER]},
}


@pytest.fixture(scope="module")
def client(tiny_tokenizer):
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer, **LIMITS)
    return TestClient(app)


def _request_fields(spec: dict, operation: dict) -> set[str]:
    """The top-level field names of an operation's JSON request body."""
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return set(schema.get("properties", {}))


def _bounded_routes(client) -> list[tuple[str, str, str]]:
    """(path, field, knob) for each bounded field of each route that takes a JSON body."""
    spec = client.get("/openapi.json").json()
    out = []
    for path, operations in spec["paths"].items():
        post = operations.get("post")
        # multipart forms (the audio routes) hold no bounded list: their bounds are the audio's
        # bytes and seconds (test_audio_decode, test_audio_routes)
        if post is None or "application/json" not in post.get("requestBody", {}).get("content",
                                                                                     {}):
            continue
        for field in sorted(_request_fields(spec, post)):
            knob = INPUT_KNOBS.get(path) if field == "input" else KNOBS.get(field)
            if knob is not None:
                out.append((path, field, knob))
    return out


def _over(value):
    """``value`` (a list of one entry, or a dict of one) with MOST + 1 entries."""
    if isinstance(value, dict):
        return {str(5 + i): 1.0 for i in range(MOST + 1)}
    return value * (MOST + 1)


def test_every_route_walked_has_a_body_here(client):
    routes = _bounded_routes(client)
    assert {path for path, _, _ in routes} == set(BODIES), routes


def test_every_route_gets_the_same_400_naming_its_field_past_each_limit(client):
    walked = 0
    for path, field, knob in _bounded_routes(client):
        body = BODIES[path]
        assert client.post(path, json=body).status_code == 200, (path, field)
        response = client.post(path, json={**body, field: _over(body[field])})
        assert response.status_code == 400, (path, field, response.text)
        error = response.json()["error"]
        assert error["param"] == field, (path, error)
        assert error["message"] == f"{field} has {MOST + 1} {_unit(knob)}; at most {MOST} per " \
            f"request ({knob})", (path, error)
        walked += 1
    assert walked >= 12


def _unit(knob: str) -> str:
    return {"MSTAR_MAX_STOP_STRINGS": "strings", "MSTAR_MAX_LOGIT_BIAS_ENTRIES": "entries",
            "MSTAR_MAX_TOOLS": "tools", "MSTAR_MAX_MESSAGES": "messages",
            "MSTAR_EMBEDDING_MAX_INPUTS": "items"}[knob]


def test_65_stop_sequences_on_messages_get_the_chat_routes_400(tiny_tokenizer):
    """Issue 33's report: 65 stop strings were a 400 on chat and a 200 on /v1/messages."""
    from starlette.testclient import TestClient

    app, engine = stub_app(tiny_tokenizer)  # the default MSTAR_MAX_STOP_STRINGS (64)
    client = TestClient(app)
    stops = [f"s{i}" for i in range(65)]
    chat = client.post("/v1/chat/completions", json={"messages": [USER], "max_tokens": 2,
                                                     "stop": stops})
    messages = client.post("/v1/messages", json={"model": STUB_MODEL, "messages": [USER],
                                                 "max_tokens": 2, "stop_sequences": stops})
    assert chat.status_code == messages.status_code == 400, messages.text
    assert messages.json()["error"]["param"] == "stop_sequences"
    assert "at most 64 per request (MSTAR_MAX_STOP_STRINGS)" in messages.text
    assert chat.json()["error"]["message"].replace("stop ", "stop_sequences ", 1) == \
        messages.json()["error"]["message"]
    assert engine.submitted == []
    ok = client.post("/v1/messages", json={"model": STUB_MODEL, "messages": [USER],
                                           "max_tokens": 2, "stop_sequences": stops[:64]})
    assert ok.status_code == 200, ok.text


LONG = "word " * 40  # 200 characters: past the MSTAR_MAX_PROMPT_CHARS below
TEXT_BODIES = [  # (path, body with LONG text, the field its 413 names)
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONG}], "max_tokens": 2},
     "messages"),
    ("/v1/messages", {"model": STUB_MODEL, "messages": [{"role": "user", "content": LONG}],
                      "max_tokens": 2}, "messages"),
    # Special-token text is rendered at a short marker (``special_text``): measured as it is.
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "<|im_start|>" + LONG}],
                              "max_tokens": 2}, "messages"),
    ("/v1/responses", {"model": STUB_MODEL, "input": LONG}, "input"),
    ("/v1/completions", {"prompt": LONG, "max_tokens": 2}, "prompt"),
    ("/generate", {"prompt": LONG, "max_tokens": 2}, "prompt"),
    ("/v1/embeddings", {"input": LONG}, "input"),
    ("/tokenize", {"prompt": LONG}, "prompt"),
    ("/tokenize", {"messages": [{"role": "user", "content": LONG}]}, "messages"),
]


@pytest.mark.parametrize(("path", "body", "field"), TEXT_BODIES)
def test_every_route_gets_the_same_413_past_the_prompt_characters(tiny_tokenizer, path, body,
                                                                  field):
    from starlette.testclient import TestClient

    app, engine = stub_app(tiny_tokenizer, max_prompt_chars=150)
    response = TestClient(app).post(path, json=body)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["param"] == field and "(MSTAR_MAX_PROMPT_CHARS)" in error["message"], error
    assert engine.submitted == []
