"""POST /v1/rerank (and /v2/rerank, Cohere's v2 path), /v1/score and /v1/classify.

Each input (a (query, document) pair, or a text to classify) runs in a worker as a prefill-only
``classify`` pooling request: the served model's classifier head gives its labels' logits at the
last token (``engine.runner.classify_head``; the inputs of one request are batched). The logits
become relevance scores or class probabilities here (``scores``). Which models have a head, and how
a pair is shown to the model (``pairs``): docs/openai_api.rst, "Rerank, score and classify".
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.pooled import pooled_vectors
from mstar.api_server.generation.run import new_request_id
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.scoring.docs import ClassifyResponse, RerankResponse, ScoreResponse
from mstar.api_server.scoring.pairs import pair_prompts
from mstar.api_server.scoring.protocol import ClassifyRequest, RerankRequest, ScoreRequest
from mstar.api_server.scoring.scores import (
    check_classifies,
    check_scores,
    probabilities,
    relevance,
)
from mstar.engine.request.sampling_params import SamplingParams
from mstar.prompt.value import Prompt

router = APIRouter()

CLASSIFY = SamplingParams(max_tokens=1, pooling="classify")


async def _pair_logits(request: Request, pairs: list[tuple[str, str]], field: str,
                       prefix: str) -> tuple[list[np.ndarray], int]:
    """Each pair's logits (``field``: what a pair's error names), and the prompts' tokens."""
    generation: Generation = request.app.state.generation
    model = request.app.state.model
    check_scores(model.labels)
    prompts = await pair_prompts(generation.tokenizer, request.app.state.running.settings,
                                 model.max_model_len, request.app.state.score_template, pairs,
                                 field)
    return await _logits(request, prompts, prefix), sum(p.num_tokens for p in prompts)


async def _logits(request: Request, prompts: list[Prompt], prefix: str) -> list[np.ndarray]:
    return await pooled_vectors(request.app.state.generation, prefix, prompts, CLASSIFY,
                                request.is_disconnected)


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": tokens, "total_tokens": tokens}


def _model_name(req: Any, request: Request) -> str:
    return req.model or request.app.state.model.name


@router.post("/v1/rerank", response_model=None,
             responses=documented(RerankResponse, GENERATION_ERRORS))
@router.post("/v2/rerank", response_model=None,
             responses=documented(RerankResponse, GENERATION_ERRORS))
async def rerank(req: RerankRequest, request: Request) -> Any:
    headers = request.app.state.gate.admit_fields(req, "rerank")
    documents = req.texts()
    logits, tokens = await _pair_logits(request, [(req.query, d) for d in documents],
                                        "documents", "rerank")
    scores = [relevance(v) for v in logits]
    ranked = sorted(range(len(documents)), key=lambda i: -scores[i])[:req.top_n]
    results = [{"index": i, "relevance_score": scores[i],
                **({"document": {"text": documents[i]}} if req.return_documents else {})}
               for i in ranked]
    return JSONResponse({"id": new_request_id("rerank"), "model": _model_name(req, request),
                         "results": results, "usage": _usage(tokens)}, headers=headers)


@router.post("/v1/score", response_model=None,
             responses=documented(ScoreResponse, GENERATION_ERRORS))
async def score(req: ScoreRequest, request: Request) -> Any:
    headers = request.app.state.gate.admit_fields(req, "score")
    queries, documents = req.queries(), req.documents()
    if len(queries) == 1:
        queries = queries * len(documents)
    elif len(queries) != len(documents):
        raise APIError(400, f"text_1 has {len(queries)} texts and text_2 {len(documents)}: give "
                       "one text_1, or one per text_2 entry", "text_1")
    logits, tokens = await _pair_logits(request, list(zip(queries, documents, strict=True)),
                                        "text_2", "score")
    data = [{"index": k, "object": "score", "score": relevance(v)} for k, v in enumerate(logits)]
    return JSONResponse({"id": new_request_id("score"), "object": "list", "created": fmt.now(),
                         "model": _model_name(req, request), "data": data,
                         "usage": _usage(tokens)}, headers=headers)


@router.post("/v1/classify", response_model=None,
             responses=documented(ClassifyResponse, GENERATION_ERRORS))
async def classify(req: ClassifyRequest, request: Request) -> Any:
    headers = request.app.state.gate.admit_fields(req, "classify")
    labels = request.app.state.model.labels
    check_classifies(labels)
    generation: Generation = request.app.state.generation
    prompts = await generation.given_prompts(req.inputs(), "input", pooled=True)
    data = []
    for k, vector in enumerate(await _logits(request, prompts, "classify")):
        probs = probabilities(vector)
        data.append({"index": k, "label": labels[int(np.argmax(probs))],
                     "probs": probs.tolist(), "num_classes": len(labels)})
    return JSONResponse({"id": new_request_id("classify"), "object": "list",
                         "created": fmt.now(), "model": _model_name(req, request), "data": data,
                         "usage": _usage(sum(p.num_tokens for p in prompts))}, headers=headers)
