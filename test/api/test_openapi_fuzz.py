"""The published schema, fuzzed: schemathesis against the ASGI app in process, on a stub engine.

Pass condition: no 5xx, every response matches the schema /openapi.json publishes (status codes,
content types, bodies, and each server-sent event of a stream), and nothing the API accepts would
fail in a worker (the stub engine encodes and decodes each sub-request as a worker does).

CI runs derandomized: the examples come from a fixed seed, so a red run is reproduced by running
it again. Each call may take up to ``REQUEST_TIMEOUT_S``: past schemathesis' own default (10 s) it
cancels the app mid-request, which answers 503, a "server error" only a loaded machine sees (the
likely cause of a red run that passed when run again). A longer random run, for developers (about
1000 examples per route, new ones each time):

    pytest test/api/test_openapi_fuzz.py --hypothesis-profile=fuzz-long --hypothesis-show-statistics
"""

from __future__ import annotations

import copy

import pytest
import schemathesis
from api_stub import STUB_LABELS, stub_app
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


OPERATIONS = [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/generate"),
              ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/health"),
              ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/v1/config")]
OPERATIONS += [("GET", "/v1/models/{model_id}"), ("POST", "/v1/responses"),
               ("GET", "/v1/responses/{response_id}"), ("DELETE", "/v1/responses/{response_id}"),
               ("POST", "/v1/messages"), ("POST", "/v1/embeddings"),
               ("POST", "/v1/audio/transcriptions"), ("POST", "/v1/audio/translations"),
               ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter")]
OPERATIONS += [("GET", "/v1/responses/{response_id}/input_items"),
               ("POST", "/v1/messages/count_tokens"), ("POST", "/v1/rerank"),
               ("POST", "/v2/rerank"), ("POST", "/v1/score"), ("POST", "/v1/classify")]
OPERATIONS += [("POST", "/v1/audio/speech")]
EXAMPLES = {"POST": 40, "GET": 3, "DELETE": 3}
LONG_EXAMPLES = 1000
REQUEST_TIMEOUT_S = 300  # a hang still fails; a slow shared CI machine does not
settings.register_profile("fuzz-long", max_examples=LONG_EXAMPLES, derandomize=False)


def _fuzz_settings(method: str) -> settings:
    """Derandomized with EXAMPLES, unless the fuzz-long profile is loaded."""
    long = settings.default.max_examples >= LONG_EXAMPLES
    return settings(max_examples=settings.default.max_examples if long else EXAMPLES[method],
                    derandomize=not long, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def api_schema(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer, labels=STUB_LABELS)  # a classifier head: rerank answers
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def test_every_operation_is_fuzzed(api_schema):
    published = {(method.upper(), path) for path, item in api_schema.raw_schema["paths"].items()
                 for method in item}
    assert published == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_route_keeps_to_its_published_schema(api_schema, method, path):
    @given(case=api_schema[path][method].as_strategy())
    @_fuzz_settings(method)
    def fuzz(case):
        case.call_and_validate(checks=CHECKS, timeout=REQUEST_TIMEOUT_S)

    fuzz()


def test_the_schema_documents_errors_and_extras(tiny_tokenizer):
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer)
    spec = TestClient(app).get("/openapi.json").json()
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    assert set(chat["responses"]) == {"200", "400", "401", "404", "413", "503", "504"}
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    event = chat["responses"]["200"]["content"]["text/event-stream"]["schema"]
    payload = event["properties"]["data"]["else"]["contentSchema"]["anyOf"]
    assert {"$ref": "#/components/schemas/ChatCompletionChunk"} in payload
    assert "ChatCompletionChunk" in spec["components"]["schemas"]
    fields = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    for extra in ("ignore_eos", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
                  "min_tokens", "stop_token_ids", "top_k", "min_p", "repetition_penalty"):
        assert extra in fields and fields[extra].get("description"), extra
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # never a 422


def test_the_schema_is_behind_the_api_key(tiny_tokenizer):
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer, api_key="k")
    client = TestClient(app)
    assert client.get("/openapi.json").status_code == 401
    ok = client.get("/openapi.json", headers={"Authorization": "Bearer k"})
    assert ok.status_code == 200 and "/tokenize" in ok.json()["paths"]


STREAMS = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]},
            "ChatCompletionChunk"),
           ("/v1/completions", {"prompt": "hi"}, "CompletionChunk")]


@pytest.mark.parametrize(("path", "body", "chunk"), STREAMS, ids=["chat", "completions"])
def test_each_event_of_a_stream_is_checked_against_the_published_chunk(api_schema, path, body,
                                                                       chunk):
    """A real stream keeps to the published event schema (ST108), and the check has teeth: the
    same stream fails against a schema whose chunk says another ``object``."""
    from schemathesis.core.failures import FailureGroup

    case = api_schema[path]["POST"].Case(body={**body, "stream": True, "max_tokens": 3})
    response = case.call(timeout=REQUEST_TIMEOUT_S)
    assert response.headers["content-type"][0].startswith("text/event-stream")
    assert response.content.endswith(b"data: [DONE]\n\n")
    case.validate_response(response, checks=CHECKS)
    tampered = copy.deepcopy(api_schema.raw_schema)
    tampered["components"]["schemas"][chunk]["properties"]["object"]["const"] = "other"
    strict = schemathesis.openapi.from_dict(tampered)
    with pytest.raises(FailureGroup, match="SSE event violates schema"):
        strict[path]["POST"].Case(body=case.body).validate_response(response, checks=CHECKS)
