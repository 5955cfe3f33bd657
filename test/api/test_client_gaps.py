"""The API gaps a pass with the newest official clients found (issue 39), each through the client
that found it, on the API server in process with a stub engine (every request gets the text "aaa"
in up to 3 tokens): Anthropic's prefill continuation and ``messages.count_tokens``, the Responses
API's ``input_items.list``, a stable ``created`` in ``models.list``, and CORS for browsers
(MSTAR_CORS_ORIGINS). The logprobs gap needs a model: test_client_gaps_serve."""

from __future__ import annotations

import copy
import time

import anthropic
import openai
import pytest
from api_stub import STUB_MODEL, stub_app
from starlette.testclient import TestClient

PREFILL = '{"answer":'
ORIGIN = "https://app.example.com"


def _claude(app) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url="http://testserver", api_key="x", max_retries=0,
                               http_client=TestClient(app))


def _openai(app) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", max_retries=0,
                         http_client=TestClient(app))


@pytest.fixture
def stub(tiny_tokenizer):
    return stub_app(tiny_tokenizer)


def test_a_final_assistant_message_is_continued_not_closed(stub, tiny_tokenizer):
    app, engine = stub
    claude = _claude(app)
    question = {"role": "user", "content": "Answer in JSON."}
    message = claude.messages.create(model=STUB_MODEL, max_tokens=3, messages=[
        question, {"role": "assistant", "content": PREFILL}])
    prompt = tiny_tokenizer.decode(engine.submitted[-1][1])
    assert prompt.endswith(PREFILL), prompt  # left open: no end of turn, no new assistant turn
    assert prompt.count("<|im_start|>assistant") == 1
    assert message.content[0].text == "aaa"  # what follows the prefill, as Anthropic returns it
    claude.messages.create(model=STUB_MODEL, max_tokens=3, messages=[question])
    opened = tiny_tokenizer.decode(engine.submitted[-1][1])
    assert opened.endswith("<|im_start|>assistant\n")  # without a prefill, a new turn
    streamed = claude.messages.create(model=STUB_MODEL, max_tokens=3, stream=True, messages=[
        question, {"role": "assistant", "content": [{"type": "text", "text": PREFILL}]}])
    assert "".join(e.delta.text for e in streamed if e.type == "content_block_delta") == "aaa"
    assert tiny_tokenizer.decode(engine.submitted[-1][1]).endswith(PREFILL)


def test_a_prefill_ending_in_whitespace_is_refused_as_anthropic_does(stub):
    app, _ = stub
    with pytest.raises(anthropic.BadRequestError) as exc:
        _claude(app).messages.create(model=STUB_MODEL, max_tokens=3, messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure, "}])
    assert exc.value.body["error"]["param"] == "messages.1.content"


def test_count_tokens_is_the_prompt_messages_would_send(stub):
    app, engine = stub
    claude = _claude(app)
    body = {"system": "Be brief.", "messages": [{"role": "user", "content": "hello there"}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}
    counted = claude.messages.count_tokens(model=STUB_MODEL, **body)
    claude.messages.create(model=STUB_MODEL, max_tokens=3, **body)
    assert counted.input_tokens == len(engine.submitted[-1][1]) > 0
    shorter = claude.messages.count_tokens(model=STUB_MODEL, messages=body["messages"])
    assert shorter.input_tokens < counted.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.count_tokens(model="no-such-model", messages=body["messages"])


def test_input_items_lists_a_stored_responses_own_input(stub):
    app, _ = stub
    client = _openai(app)
    first = client.responses.create(model=STUB_MODEL, input="first question",
                                    max_output_tokens=3)
    second = client.responses.create(model=STUB_MODEL, previous_response_id=first.id,
                                     max_output_tokens=3, input=[
                                         {"role": "user", "content": "second question"},
                                         {"role": "user", "content": [
                                             {"type": "input_text", "text": "and a third"}]}])
    newest_first = client.responses.input_items.list(second.id)
    texts = [item.content[0].text for item in newest_first.data]
    assert texts == ["and a third", "second question"]  # its own input only, desc by default
    assert all(item.type == "message" and item.role == "user" for item in newest_first.data)
    oldest_first = client.responses.input_items.list(second.id, order="asc", limit=1)
    assert [i.content[0].text for i in oldest_first.data] == ["second question"]
    assert oldest_first.has_more
    rest = client.responses.input_items.list(second.id, order="asc", after=oldest_first.last_id)
    assert [i.content[0].text for i in rest.data] == ["and a third"] and not rest.has_more
    assert [i.content[0].text for i in client.responses.input_items.list(first.id).data] == [
        "first question"]
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")


def test_models_created_is_the_same_in_every_listing(stub):
    app, _ = stub
    client = _openai(app)
    before = client.models.list().data[0].created
    time.sleep(1.05)  # a clock read per request would have moved on
    assert client.models.list().data[0].created == before
    assert client.models.retrieve(STUB_MODEL).created == before


PREFLIGHT = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization,content-type"}


def test_cors_is_off_by_default(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer)
    preflight = TestClient(app).options("/v1/chat/completions", headers=PREFLIGHT)
    assert preflight.status_code == 405
    assert "access-control-allow-origin" not in preflight.headers


def test_cors_answers_the_allowed_origins_preflight_before_authentication(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer, api_key="sk-test",
                      cors_origins=f"{ORIGIN}, http://localhost:3000")
    client = TestClient(app)
    preflight = client.options("/v1/chat/completions", headers=PREFLIGHT)
    assert preflight.status_code == 200, preflight.text  # no key needed: browsers send none
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    ok = client.post("/v1/chat/completions", json=chat,
                     headers={"Origin": ORIGIN, "Authorization": "Bearer sk-test"})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ORIGIN
    denied = client.post("/v1/chat/completions", json=chat, headers={"Origin": ORIGIN})
    assert denied.status_code == 401  # readable by the page: the error carries the header too
    assert denied.headers["access-control-allow-origin"] == ORIGIN
    other = client.options("/v1/chat/completions",
                           headers={**PREFLIGHT, "Origin": "https://evil.example"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    assert "access-control-allow-origin" not in client.get(
        "/health", headers={"Origin": "https://evil.example"}).headers


def test_embedding_token_ids_past_the_vocabulary_are_refused_by_index(stub, tiny_tokenizer):
    app, engine = stub
    client, vocab = _openai(app), len(tiny_tokenizer)
    for given, param in (([[1, 2], [3, 4, 5, 6, 7, vocab]], "input.1.5"),
                         ([1, vocab + 9], "input.1")):
        with pytest.raises(openai.BadRequestError) as exc:
            client.embeddings.create(model=STUB_MODEL, input=given)
        assert exc.value.body["param"] == param, exc.value.body
        assert "vocabulary" in exc.value.body["message"]
    with pytest.raises(openai.BadRequestError) as exc:  # negative: refused by the schema
        client.embeddings.create(model=STUB_MODEL, input=[[-1]])
    assert exc.value.body["param"] == "input.0.0"
    client.embeddings.create(model=STUB_MODEL, input=[[0, vocab - 1]])
    assert engine.submitted[-1][1] == [0, vocab - 1]


def test_a_continued_prefill_is_answer_text_not_reasoning(tiny_tokenizer):
    thinking = copy.deepcopy(tiny_tokenizer)  # a template whose new turn opens <think>
    thinking.chat_template = tiny_tokenizer.chat_template.replace(
        "<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant\n<think>\n{% endif %}")
    app, _ = stub_app(thinking, reasoning_parser="think")
    claude = _claude(app)
    question = {"role": "user", "content": "Answer in JSON."}
    opened = claude.messages.create(model=STUB_MODEL, max_tokens=3, messages=[question])
    assert opened.content[0].type == "thinking"  # a new turn starts inside <think>
    continued = claude.messages.create(model=STUB_MODEL, max_tokens=3, messages=[
        question, {"role": "assistant", "content": PREFILL}])
    assert [(b.type, b.text) for b in continued.content] == [("text", "aaa")]
