"""Pooling requests run to their vectors: embeddings (the final hidden state pooled) and
classifier logits (rerank, score, classify), one vector per prompt, in prompt order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

import numpy as np

from mstar.api_server.generation.run import new_request_id
from mstar.api_server.http.errors import APIError
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector
from mstar.prompt.value import Prompt


async def pooled_vectors(generation: Any, prefix: str, prompts: list[Prompt],
                         params: SamplingParams,
                         is_disconnected: Callable[[], Awaitable[bool]]) -> list[np.ndarray]:
    """Each prompt's vector (``generation``: the routes' ``Generation``); a 503 when one did not
    come back (aborted in the worker, or the client went away)."""
    vectors: list[np.ndarray | None] = [None] * len(prompts)
    jobs = [(prompt, params) for prompt in prompts]
    async with aclosing(generation.run(new_request_id(prefix), jobs, is_disconnected)) as outputs:
        async for i, out in outputs:
            if out.embedding is not None:
                vectors[i] = bytes_vector(out.embedding)
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        raise APIError(503, f"no vector came back for input {missing[0]}")
    return vectors
