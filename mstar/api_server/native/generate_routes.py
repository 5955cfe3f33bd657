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

from mstar.api_server.generation.choice import finish_reason
from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.run import first_output, new_request_id, replay
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.openai.completion_protocol import GenerateRequest
from mstar.api_server.openai.response_models import GenerateResponse
from mstar.api_server.openai.structured import structured_output
from mstar.api_server.validation.request_rules import check_batch_size
from mstar.output.processor import TextOutput

router = APIRouter()


def _line(i: int, out: TextOutput) -> dict[str, Any]:
    line: dict[str, Any] = {"index": i, "text": out.new_text, "token_ids": out.new_token_ids,
                            "finished": out.finished, "finish_reason": finish_reason(out)}
    if out.logprobs:
        line["logprobs"] = [msgspec.structs.asdict(e) for e in out.logprobs]
    if out.finished:
        line["usage"] = fmt.usage(out.num_prompt_tokens, out.num_output_tokens,
                                  out.num_cached_tokens)
    return line


@router.post("/generate", response_model=None,
             responses=documented(GenerateResponse, GENERATION_ERRORS, "application/x-ndjson"))
async def generate(req: GenerateRequest, request: Request) -> Any:
    generation: Generation = request.app.state.generation
    settings = request.app.state.running.settings
    headers = request.app.state.gate.admit(req, None, (check_batch_size,))
    structured = await structured_output(req, settings)
    prompts = await generation.given_prompts(req.prompts(), "prompt")
    jobs = generation.jobs(req, prompts, "prompt", structured)
    request_id = new_request_id("gen")
    if not req.stream:
        choices = await generation.collect(request_id, jobs, request.is_disconnected)
        return JSONResponse({
            "id": request_id, "model": request.app.state.model.name,
            "choices": [{"index": i, "text": c.text, "token_ids": c.token_ids,
                         "finish_reason": c.finish_reason} for i, c in enumerate(choices)],
            "usage": fmt.total_usage(choices, [p.num_tokens for p in prompts])},
            headers=headers)
    outputs = generation.run(request_id, jobs)
    first = await first_output(outputs)
    interval = settings.stream_interval

    async def lines() -> AsyncIterator[bytes]:
        async with aclosing(outputs):
            try:
                async for i, out in fmt.coalesce(replay(first, outputs), interval):
                    yield framing.json_line(_line(i, out))
            except APIError as exc:
                yield framing.json_line(exc.body())

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)
