"""Rerank, score and classify through `mstar serve` on a tiny random
Qwen3ForSequenceClassification (one relevance label), with the official ``cohere`` client (v1 and
v2): the scores equal transformers' (the cross-encoder's sigmoid over its pair encoding), fp32 on
CPU, all documents of a request batched; and the classifier generates nothing."""

from __future__ import annotations

import math

import cohere
import httpx
import pytest
import torch
from classifier_models import save_tiny_classifier
from serve_helpers import hard_timeout, running_server  # noqa: F401 (hard_timeout: autouse)
from transformers import AutoModelForSequenceClassification

QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital of France.", "The quick brown fox jumps over the lazy dog.",
             "Berlin is the capital of Germany.", "Numbers: 0 1 2 3"]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_classifier(tmp_path_factory.mktemp("reranker"), "qwen3", 1, tiny_tokenizer)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    yield from running_server(model_dir, tmp_path_factory.mktemp("rerank") / "s.log",
                              {"MSTAR_DTYPE": "float32", "MSTAR_SERVED_MODEL_NAMES": "m"})


@pytest.fixture(scope="module")
def expected(model_dir, tiny_tokenizer) -> list[float]:
    """transformers: each (query, document) pair alone, the sigmoid of its one logit."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    scores = []
    for doc in DOCUMENTS:
        with torch.inference_mode():
            logit = model(**tiny_tokenizer(QUERY, doc, return_tensors="pt")).logits[0, 0]
        scores.append(float(torch.sigmoid(logit)))
    return scores


def test_cohere_rerank_matches_transformers(server, expected):
    client = cohere.Client(base_url=server.url, api_key="x", timeout=30)
    ranked = client.rerank(model="m", query=QUERY, documents=DOCUMENTS)
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -expected[i])
    assert [r.index for r in ranked.results] == order
    for result in ranked.results:
        assert abs(result.relevance_score - expected[result.index]) < TOLERANCE
        assert result.document.text == DOCUMENTS[result.index]
    top = cohere.ClientV2(base_url=server.url, api_key="x", timeout=30).rerank(
        model="m", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [r.index for r in top.results] == order[:2]


def test_score_and_classify_match_transformers(server, expected):
    body = httpx.post(server.url + "/v1/score", json={"text_1": QUERY, "text_2": DOCUMENTS},
                      timeout=30).json()
    assert [abs(d["score"] - want) < TOLERANCE
            for d, want in zip(body["data"], expected, strict=True)] == [True] * len(DOCUMENTS)
    classified = httpx.post(server.url + "/v1/classify", json={"input": ["a", "b c"]},
                            timeout=30).json()
    assert [d["label"] for d in classified["data"]] == ["LABEL_0"] * 2
    assert all(0 < d["probs"][0] < 1 and d["num_classes"] == 1 for d in classified["data"])
    assert not math.isnan(classified["data"][0]["probs"][0])


def test_a_sequence_classifier_generates_nothing(server):
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "model"
