"""Rerank, score and classify: POST /v1/rerank (and /v2/rerank), /v1/score and /v1/classify."""
