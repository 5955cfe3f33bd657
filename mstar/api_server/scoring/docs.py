"""The published schema of the answers of /v1/rerank, /v1/score and /v1/classify (documentation
only: the routes build their JSON directly, and the fuzz test checks real responses against
these)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class PoolingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(description="0 .. 1: higher is more relevant.")
    document: RerankDocument | None = Field(None, description="With return_documents.")


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult] = Field(description="Most relevant first.")
    usage: PoolingUsage


class Score(BaseModel):
    index: int
    object: Literal["score"]
    score: float = Field(description="0 .. 1: higher is more relevant.")


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[Score]
    usage: PoolingUsage


class Classification(BaseModel):
    index: int
    label: str = Field(description="The most probable label.")
    probs: list[float] = Field(description="Per label, in the model's label order.")
    num_classes: int


class ClassifyResponse(BaseModel):
    id: str
    object: Literal["list"]
    created: int
    model: str
    data: list[Classification]
    usage: PoolingUsage
