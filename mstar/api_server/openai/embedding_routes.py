"""POST /v1/embeddings: one vector per input, pooled from the served model's final hidden states.

Each input runs in a worker as a prefill-only pooling request (``SamplingParams.pooling``, see
``mstar.engine.runner.pooling``: last token or mean, MSTAR_EMBEDDING_POOLING). The vector is scaled to
unit length here, as OpenAI's are, and sent as numbers or as base64 of little-endian float32.
"""

from __future__ import annotations

import asyncio
import base64
from contextlib import aclosing
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mstar.api_server.generation.prompts import check_prompt_chars, check_prompt_len, encode
from mstar.api_server.generation.run import new_request_id, run_requests
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai.embedding_protocol import EmbeddingRequest, EmbeddingResponse
from mstar.api_server.state import ServerState
from mstar.api_server.validation.request_rules import admit_fields
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector

router = APIRouter()

POOLING = SamplingParams(max_tokens=1, pooling="auto")  # the engine's rule picks last or mean


@router.post("/v1/embeddings", response_model=None,
             responses=documented(EmbeddingResponse, GENERATION_ERRORS))
async def embeddings(req: EmbeddingRequest, request: Request) -> Any:
    state: ServerState = request.app.state.server
    headers = admit_fields(state, req, "embeddings")
    inputs = req.inputs()
    most = state.settings.embedding_max_inputs
    if len(inputs) > most:
        raise APIError(400, f"input has {len(inputs)} items; at most {most} per request "
                       "(MSTAR_EMBEDDING_MAX_INPUTS)", "input")
    prompts = await asyncio.to_thread(_input_ids, state, inputs)
    vectors = await _pooled(state, request, prompts)
    data = [{"object": "embedding", "index": i, "embedding": _encoded(v, req.encoding_format)}
            for i, v in enumerate(vectors)]
    num_tokens = sum(len(p) for p in prompts)
    return JSONResponse({"object": "list", "data": data, "model": req.model or state.model_name,
                         "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens}},
                        headers=headers)


def _input_ids(state: ServerState, inputs: list[str | list[int]]) -> list[list[int]]:
    """Each input's token ids; a 400 names ``input`` (or ``input.k`` in a batch)."""
    ids = []
    for k, item in enumerate(inputs):
        param = f"input.{k}" if len(inputs) > 1 else "input"
        if isinstance(item, str):
            check_prompt_chars(item, state.settings.max_prompt_chars, param)
            ids.append(encode(state.tokenizer, item, True, state.max_model_len, param, pooled=True))
            continue
        vocab = len(state.tokenizer)
        bad = [t for t in item if not 0 <= t < vocab]
        if bad:
            raise APIError(400, f"input token ids out of range [0, {vocab}): {bad[:5]}", param)
        check_prompt_len(len(item), state.max_model_len, param, pooled=True)
        ids.append(list(item))
    return ids


async def _pooled(state: ServerState, request: Request, prompts: list[list[int]]
                  ) -> list[np.ndarray]:
    vectors: list[np.ndarray | None] = [None] * len(prompts)
    jobs = [(ids, POOLING) for ids in prompts]
    async with aclosing(run_requests(state, new_request_id("embd"), jobs,
                                     request.is_disconnected)) as outputs:
        async for i, out in outputs:
            if out.embedding is not None:
                vectors[i] = bytes_vector(out.embedding)
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:  # aborted in the worker, or the client went away
        raise APIError(503, f"no vector came back for input {missing[0]}")
    return vectors


def _encoded(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    unit = (vector / max(float(np.linalg.norm(vector)), 1e-12)).astype("<f4")
    if encoding_format == "base64":
        return base64.b64encode(unit.tobytes()).decode("ascii")
    return unit.tolist()
