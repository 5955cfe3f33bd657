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

from mstar.api_server import formatting as fmt
from mstar.api_server.errors import APIError, parse_body
from mstar.api_server.generation import (
    collect_choices,
    completion_prompt_ids,
    first_output,
    new_request_id,
    replay,
    run_requests,
    sampling_params,
)
from mstar.api_server.protocol import GenerateRequest
from mstar.api_server.state import ServerState
from mstar.engine.outputs import RequestOutput

router = APIRouter()


def _line(i: int, out: RequestOutput) -> dict[str, Any]:
    line: dict[str, Any] = {"index": i, "text": out.new_text, "token_ids": out.new_token_ids,
                            "finished": out.finished, "finish_reason": fmt.finish_reason(out)}
    if out.logprobs:
        line["logprobs"] = [msgspec.structs.asdict(e) for e in out.logprobs]
    if out.finished:
        line["usage"] = fmt.usage(out.num_prompt_tokens, out.num_output_tokens,
                                  out.num_cached_tokens)
    return line


@router.post("/generate")
async def generate(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await parse_body(request, GenerateRequest)
    prompt_ids = completion_prompt_ids(state, req)
    params = sampling_params(state, req, len(prompt_ids))
    request_id = new_request_id("gen")
    if not req.stream:
        choices = await collect_choices(state, request_id, prompt_ids, params,
                                        request.is_disconnected)
        return JSONResponse({
            "id": request_id, "model": state.model_name,
            "choices": [{"index": i, "text": c.text, "token_ids": c.token_ids,
                         "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
            "usage": fmt.total_usage(choices, len(prompt_ids))})
    outputs = run_requests(state, request_id, prompt_ids, params)
    first = await first_output(outputs)

    async def lines() -> AsyncIterator[bytes]:
        async with aclosing(outputs):
            try:
                async for i, out in fmt.coalesce(replay(first, outputs), state.settings.stream_interval):
                    yield fmt.json_line(_line(i, out))
            except APIError as exc:
                yield fmt.json_line(exc.body())

    return StreamingResponse(lines(), media_type="application/x-ndjson")
