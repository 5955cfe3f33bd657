"""Classifier logits (one vector per input, ``engine.runner.classify_head``) as what the routes
return: a relevance score for rerank and score, class probabilities for classify."""

from __future__ import annotations

import numpy as np

from mstar.api_server.http.errors import APIError

RELEVANCE_LABELS = (1, 2)  # a relevance logit, or a (no, yes) pair


def check_classifies(labels: tuple[str, ...]) -> None:
    if not labels:
        raise APIError(400, "the served model has no classifier head: serve a "
                       "*ForSequenceClassification model, or set MSTAR_SCORE_TOKENS for a "
                       "reranker that judges with two tokens (docs/openai_api.rst)", "model")


def check_scores(labels: tuple[str, ...]) -> None:
    """Rerank and score need one relevance logit or a (no, yes) pair."""
    check_classifies(labels)
    if len(labels) not in RELEVANCE_LABELS:
        raise APIError(400, f"the served model classifies into {len(labels)} labels; rerank and "
                       "score need one (a relevance logit) or two (no, yes): use /v1/classify",
                       "model")


def probabilities(logits: np.ndarray) -> np.ndarray:
    """Softmax over the labels; one label: its sigmoid (a binary classifier's probability)."""
    logits = logits.astype(np.float64)
    if logits.shape[0] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def relevance(logits: np.ndarray) -> float:
    """sigmoid(logit) for one label; softmax's probability of the second (yes) for two."""
    return float(probabilities(logits)[-1])
