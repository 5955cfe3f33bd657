"""POST /generate: mstar's native endpoint, streaming one JSON object per line (NDJSON).

Each line: {"index", "text" (delta), "token_ids" (new ids), "finished", "finish_reason"}; the last
line of each choice also carries "usage". Errors after the stream started arrive as an
{"error": {...}} line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mstar.api_server.generation.prompts import completion_prompt_ids
from mstar.api_server.generation.run import (
    collect_choices,
    first_output,
    jobs_for,
    new_request_id,
    replay,
    run_requests,
)
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.openai.completion_protocol import GenerateRequest
from mstar.api_server.openai.response_models import GenerateResponse
from mstar.api_server.openai.structured import structured_output
from mstar.api_server.state import ServerState
from mstar.api_server.validation.request_rules import admit
from mstar.output.processor import TextOutput

router = APIRouter()


def _line(i: int, out: TextOutput) -> dict[str, Any]:
    line: dict[str, Any] = {"index": i, "text": out.new_text, "token_ids": out.new_token_ids,
                            "finished": out.finished, "finish_reason": fmt.finish_reason(out)}
    if out.logprobs:
        line["logprobs"] = [msgspec.structs.asdict(e) for e in out.logprobs]
    if out.finished:
        line["usage"] = fmt.usage(out.num_prompt_tokens, out.num_output_tokens,
                                  out.num_cached_tokens)
    return line


@router.post("/generate", response_model=None,
             responses=documented(GenerateResponse, GENERATION_ERRORS, "application/x-ndjson"))
async def generate(req: GenerateRequest, request: Request) -> Any:
    state: ServerState = request.app.state.server
    headers = admit(state, req, None)
    structured = await structured_output(req, state.settings)
    prompts = await completion_prompt_ids(state, req.prompts())
    jobs = jobs_for(state, req, prompts, "prompt", structured)
    request_id = new_request_id("gen")
    if not req.stream:
        choices = await collect_choices(state, request_id, jobs, request.is_disconnected)
        return JSONResponse({
            "id": request_id, "model": state.model_name,
            "choices": [{"index": i, "text": c.text, "token_ids": c.token_ids,
                         "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
            "usage": fmt.total_usage(choices, [len(p) for p in prompts])}, headers=headers)
    outputs = run_requests(state, request_id, jobs)
    first = await first_output(outputs)

    async def lines() -> AsyncIterator[bytes]:
        async with aclosing(outputs):
            try:
                async for i, out in fmt.coalesce(replay(first, outputs), state.settings.stream_interval):
                    yield fmt.json_line(_line(i, out))
            except APIError as exc:
                yield fmt.json_line(exc.body())

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)
