"""POST /v1/embeddings: one vector per input, pooled from the served model's final hidden states.

Each input runs in a worker as a prefill-only pooling request (``SamplingParams.pooling``, see
``mstar.engine.runner.pooling``: last token or mean, MSTAR_EMBEDDING_POOLING). The vector is scaled to
unit length here, as OpenAI's are, and sent as numbers or as base64 of little-endian float32.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.pooled import pooled_vectors
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai.embedding_protocol import EmbeddingRequest, EmbeddingResponse
from mstar.engine.request.sampling_params import SamplingParams

router = APIRouter()

POOLING = SamplingParams(max_tokens=1, pooling="auto")  # the engine's rule picks last or mean


@router.post("/v1/embeddings", response_model=None,
             responses=documented(EmbeddingResponse, GENERATION_ERRORS))
async def embeddings(req: EmbeddingRequest, request: Request) -> Any:
    generation: Generation = request.app.state.generation
    headers = request.app.state.gate.admit_fields(req, "embeddings")
    prompts = await generation.given_prompts(req.inputs(), "input", pooled=True)
    vectors = await pooled_vectors(generation, "embd", prompts, POOLING,
                                   request.is_disconnected)
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, req.encoding_format)}
            for i, v in enumerate(vectors)]
    num_tokens = sum(p.num_tokens for p in prompts)
    model = req.model or request.app.state.model.name
    return JSONResponse({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens}},
                        headers=headers)


def _encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    unit = (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype("<f4")
    if encoding_format == "base64":
        return base64.b64encode(unit.tobytes()).decode("ascii")
    return unit.tolist()
