"""POST /v1/rerank, /v2/rerank, /v1/score and /v1/classify on the API server in process with a stub
engine whose one-label classifier scores a prompt by its length (longer is more relevant): the
pairing, ordering, top_n and return_documents, the probabilities, the pair template, and the
refusals (a model without a head; generation on a sequence classifier)."""

from __future__ import annotations

import math

import pytest
from api_stub import STUB_LABELS, stub_app
from starlette.testclient import TestClient

DOCS = ["short", "a much longer document than the others", "middling one"]


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


@pytest.fixture
def stub(tiny_tokenizer):
    app, engine = stub_app(tiny_tokenizer, labels=STUB_LABELS)
    return TestClient(app), engine


def test_rerank_ranks_best_first_with_scores_and_documents(stub, tiny_tokenizer):
    client, engine = stub
    for path in ("/v1/rerank", "/v2/rerank"):
        body = client.post(path, json={"query": "which?", "documents": DOCS}).json()
        assert [r["index"] for r in body["results"]] == [1, 2, 0]
        prompts = {tiny_tokenizer.decode(ids): ids for _, ids, _ in engine.submitted[-3:]}
        first = body["results"][0]
        pair = tiny_tokenizer("which?", DOCS[1])["input_ids"]  # the tokenizer's pair encoding
        assert tiny_tokenizer.decode(pair) in prompts
        assert math.isclose(first["relevance_score"], _sigmoid(len(pair) / 10), rel_tol=1e-6)
        assert first["document"] == {"text": DOCS[1]}
        assert body["usage"]["total_tokens"] == sum(len(i) for i in prompts.values())
    assert all(p.pooling == "classify" for _, _, p in engine.submitted)
    top = client.post("/v1/rerank", json={"query": "which?", "documents": [{"text": d} for d in DOCS],
                                          "top_n": 2, "return_documents": False}).json()
    assert [r["index"] for r in top["results"]] == [1, 2]
    assert all("document" not in r for r in top["results"])


def test_score_pairs_one_query_with_each_document_or_one_to_one(stub):
    client, _ = stub
    one = client.post("/v1/score", json={"text_1": "q", "text_2": DOCS}).json()
    assert [d["index"] for d in one["data"]] == [0, 1, 2] and one["object"] == "list"
    scores = [d["score"] for d in one["data"]]
    assert scores[1] > scores[2] > scores[0] and all(0 < s < 1 for s in scores)
    paired = client.post("/v1/score", json={"text_1": ["q", "q", "q"], "text_2": DOCS}).json()
    assert [d["score"] for d in paired["data"]] == scores
    bad = client.post("/v1/score", json={"text_1": ["q", "r"], "text_2": DOCS})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text_1"


def test_classify_gives_each_inputs_probabilities_and_label(stub, tiny_tokenizer):
    client, _ = stub
    body = client.post("/v1/classify", json={"input": ["a", "longer input here"]}).json()
    assert [d["index"] for d in body["data"]] == [0, 1]
    for item, text in zip(body["data"], ["a", "longer input here"], strict=True):
        assert item["label"] == STUB_LABELS[0] and item["num_classes"] == 1
        expected = _sigmoid(len(tiny_tokenizer.encode(text)) / 10)
        assert math.isclose(item["probs"][0], expected, rel_tol=1e-6)


def test_a_pair_template_shows_query_and_document_where_it_says(tiny_tokenizer, tmp_path):
    template = tmp_path / "pair.txt"
    template.write_text("<Query>: {query}\n<Document>: {document}<|im_end|>")
    app, engine = stub_app(tiny_tokenizer, labels=("no", "yes"), score_template=template)
    resp = TestClient(app).post("/v1/score", json={"text_1": "{document}", "text_2": "Paris"})
    assert resp.status_code == 200, resp.text
    shown = tiny_tokenizer.decode(engine.submitted[-1][1])
    assert shown == "<Query>: {document}\n<Document>: Paris<|im_end|>"  # filled in one pass


def test_a_model_without_a_classifier_head_is_refused_naming_model(tiny_tokenizer):
    client = TestClient(stub_app(tiny_tokenizer)[0])
    for path, body in (("/v1/rerank", {"query": "q", "documents": ["d"]}),
                       ("/v1/score", {"text_1": "q", "text_2": "d"}),
                       ("/v1/classify", {"input": "x"})):
        resp = client.post(path, json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "model", resp.text
        assert "classifier head" in resp.json()["error"]["message"]


def test_a_many_label_classifier_classifies_but_does_not_rerank(tiny_tokenizer):
    client = TestClient(stub_app(tiny_tokenizer, labels=("a", "b", "c"))[0])
    resp = client.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
    assert resp.status_code == 400 and "3 labels" in resp.json()["error"]["message"]


def test_a_sequence_classifier_refuses_generation_naming_model(tiny_tokenizer):
    client = TestClient(stub_app(tiny_tokenizer, labels=STUB_LABELS, generates=False)[0])
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "h"}]}),
                       ("/v1/completions", {"prompt": "h"})):
        resp = client.post(path, json=body)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "model", resp.text
    assert client.post("/v1/classify", json={"input": "x"}).status_code == 200
    assert client.post("/v1/embeddings", json={"input": "x"}).status_code == 200


def test_a_pair_past_max_model_len_names_its_document(tiny_tokenizer):
    client = TestClient(stub_app(tiny_tokenizer, labels=STUB_LABELS, max_model_len=16)[0])
    resp = client.post("/v1/rerank", json={"query": "q", "documents": ["ok", "word " * 40]})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "documents.1", resp.text
