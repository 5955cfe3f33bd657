"""Every row of the request-field table (docs/openai_api.rst) behaves as the table says, on the
API server in process with a stub engine; and the table, the docs and the request models agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_stub import STUB_LABELS, stub_app
from field_checks import check_refused
from starlette.testclient import TestClient

from mstar.api_server.validation.field_table import TABLE, FieldRow, rst_table

BASE = {"chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 2}),
        "completions": ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
        "responses": ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
        "messages": ("/v1/messages", {"model": "stub-model", "max_tokens": 2,
                                      "messages": [{"role": "user", "content": "hi"}]}),
        "embeddings": ("/v1/embeddings", {"input": "hi"}),
        "rerank": ("/v1/rerank", {"query": "q", "documents": ["a", "b c"]}),
        "score": ("/v1/score", {"text_1": "q", "text_2": ["a", "b c"]}),
        "classify": ("/v1/classify", {"input": "hi"})}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "openai_api.rst"
# the audio routes' rows (multipart forms) are sent by test_audio_fields.py
CASES = [(endpoint, row) for row in TABLE for endpoint in row.endpoints if endpoint in BASE]


def _id(case: tuple[str, FieldRow]) -> str:
    return f"{case[0]}:{case[1].name}"


@pytest.fixture(scope="module")
def stub(tiny_tokenizer):
    app, engine = stub_app(tiny_tokenizer, labels=STUB_LABELS)
    return TestClient(app), engine


def _post(client: TestClient, endpoint: str, fragment: dict):
    path, base = BASE[endpoint]
    return client.post(path, json={**base, **fragment})


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_each_field_behaves_as_the_table_says(stub, case):
    endpoint, row = case
    client, _ = stub
    if row.accepted is not None:
        resp = _post(client, endpoint, row.accepted)
        assert resp.status_code == 200, resp.text
        assert "x-mstar-ignored-fields" not in resp.headers  # a known field, never "unknown"
    if row.refused is not None:
        check_refused(_post(client, endpoint, row.refused), row)
    assert row.accepted is not None or row.refused is not None


def test_every_top_level_field_has_a_row_and_every_row_a_field():
    from mstar.api_server.openai.chat_protocol import ChatCompletionRequest, ChatMessage
    from mstar.api_server.openai.completion_protocol import CompletionRequest

    for endpoint, model in (("chat", ChatCompletionRequest), ("completions", CompletionRequest)):
        rows = {row.name.split(".")[0] for row in TABLE if endpoint in row.endpoints}
        assert rows == set(model.model_fields), endpoint
    message_rows = {row.name.split(".")[2].split(" ")[0] for row in TABLE
                    if row.name.startswith("messages.*.")}
    assert message_rows | {"role", "tool_call_id"} == set(ChatMessage.model_fields)


def test_the_docs_table_is_the_table_in_code():
    text = DOCS.read_text()
    start = text.index(".. field-table-start") + len(".. field-table-start\n\n")
    end = text.index(".. field-table-end")
    assert text[start:end].strip() == rst_table().strip(), (
        "docs/openai_api.rst is stale: paste the output of "
        "`python -m mstar.api_server.validation.field_table` between its field-table markers")


@pytest.mark.parametrize(("doc", "endpoint"), [("openai_api.rst", "responses"),
                                               ("openai_api.rst", "embeddings"),
                                               ("openai_api.rst", "rerank"),
                                               ("openai_api.rst", "score"),
                                               ("openai_api.rst", "classify"),
                                               ("anthropic_api.rst", "messages")])
def test_the_docs_tables_of_responses_and_messages_are_the_tables_in_code(doc, endpoint):
    text = (DOCS.parent / doc).read_text()
    start = text.index(f".. {endpoint}-table-start") + len(f".. {endpoint}-table-start\n\n")
    end = text.index(f".. {endpoint}-table-end")
    assert text[start:end].strip() == rst_table((endpoint,)).strip(), (
        f"docs/{doc} is stale: paste the output of "
        f"`python -m mstar.api_server.validation.field_table {endpoint}` between its markers")


def test_every_responses_messages_and_embeddings_field_has_a_row():
    from mstar.api_server.anthropic.protocol import MessagesRequest
    from mstar.api_server.openai.embedding_protocol import EmbeddingRequest
    from mstar.api_server.responses.protocol import ResponsesRequest
    from mstar.api_server.scoring.protocol import ClassifyRequest, RerankRequest, ScoreRequest

    for endpoint, model in (("responses", ResponsesRequest), ("messages", MessagesRequest),
                            ("embeddings", EmbeddingRequest), ("rerank", RerankRequest),
                            ("score", ScoreRequest), ("classify", ClassifyRequest)):
        rows = {row.name.split(".")[0].split(" ")[0] for row in TABLE if endpoint in row.endpoints}
        assert rows == set(model.model_fields), endpoint
