"""POST /v1/chat/completions and /v1/completions: OpenAI-compatible, streaming (SSE) or not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mstar.api_server import formatting as fmt
from mstar.api_server.errors import APIError, parse_body
from mstar.api_server.generation import (
    collect_choices,
    first_output,
    new_request_id,
    replay,
    run_requests,
    sampling_params,
)
from mstar.api_server.prompts import chat_prompt_ids, completion_prompt_ids
from mstar.api_server.protocol import ChatCompletionRequest, CompletionRequest
from mstar.api_server.state import ServerState
from mstar.api_server.tools.plan import NO_TOOLS, ToolPlan, request_tool_plan, with_forced_call
from mstar.api_server.tools.response import StreamedChoice, final_message
from mstar.engine.outputs import RequestOutput

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await parse_body(request, ChatCompletionRequest)
    tools = await request_tool_plan(req, state.settings.tool_call_parser,
                                    state.tokenizer.chat_template)
    prompt_ids = await chat_prompt_ids(state, req, tools.shown_tools)
    return await _respond(state, request, req, prompt_ids, chat=True, tools=tools)


@router.post("/v1/completions")
async def completions(request: Request) -> Any:
    state: ServerState = request.app.state.server
    req = await parse_body(request, CompletionRequest)
    prompt_ids = await completion_prompt_ids(state, req)
    return await _respond(state, request, req, prompt_ids, chat=False)


async def _respond(state: ServerState, request: Request, req: Any, prompt_ids: list[int],
                   chat: bool, tools: ToolPlan = NO_TOOLS) -> Any:
    params = with_forced_call(tools, sampling_params(state, req, len(prompt_ids),
                                                     "messages" if chat else "prompt"))
    request_id = new_request_id("chatcmpl" if chat else "cmpl")
    if req.stream:
        outputs = run_requests(state, request_id, prompt_ids, params)
        first = await first_output(outputs)
        body = _stream(state, req, request_id, prompt_ids, first, outputs, chat, tools)
        return StreamingResponse(body, media_type="text/event-stream")
    choices = await collect_choices(state, request_id, prompt_ids, params, request.is_disconnected)
    return JSONResponse(_final(state, req, request_id, prompt_ids, choices, chat, tools))


def _final(state: ServerState, req: Any, request_id: str, prompt_ids: list[int],
           choices: list[fmt.Choice], chat: bool, tools: ToolPlan) -> dict:
    body = fmt.envelope(request_id, "chat.completion" if chat else "text_completion",
                        state.model_name, fmt.now(), state.settings.fingerprint())
    items = []
    for i, c in enumerate(choices):
        logprobs = None
        if req.num_logprobs() is not None:
            logprobs = (fmt.chat_logprobs(state.tokenizer, c.logprobs) if chat
                        else fmt.completion_logprobs(state.tokenizer, c.logprobs, 0))
        item: dict[str, Any] = {"index": i, "logprobs": logprobs, "finish_reason": c.finish_reason}
        if chat:
            item["message"], item["finish_reason"] = final_message(tools, c.text, c.finish_reason)
        else:
            item["text"] = c.text
        items.append(item)
    body["choices"] = items
    body["usage"] = fmt.total_usage(choices, len(prompt_ids))
    return body


async def _stream(state: ServerState, req: Any, request_id: str, prompt_ids: list[int],
                  first: tuple[int, RequestOutput], outputs: AsyncIterator, chat: bool,
                  tools: ToolPlan) -> AsyncIterator[bytes]:
    base = fmt.envelope(request_id, "chat.completion.chunk" if chat else "text_completion",
                        state.model_name, fmt.now(), state.settings.fingerprint())
    choices = [fmt.Choice() for _ in range(req.n)]
    streamed = [StreamedChoice(tools) for _ in range(req.n)]
    want_logprobs = req.num_logprobs() is not None
    offsets = [0] * req.n
    if chat:
        for i in range(req.n):
            delta = {"role": "assistant", "content": ""}
            yield fmt.sse({**base, "choices": [{"index": i, "delta": delta, "logprobs": None,
                                                "finish_reason": None}]})

    async with aclosing(outputs):
        try:
            async for i, out in fmt.coalesce(replay(first, outputs), state.settings.stream_interval):
                choices[i].add(out)
                item: dict[str, Any] = {"index": i, "logprobs": None,
                                        "finish_reason": fmt.finish_reason(out)}
                entries = out.logprobs or []
                if chat:
                    if want_logprobs:
                        item["logprobs"] = fmt.chat_logprobs(state.tokenizer, entries)
                    for chunk in streamed[i].chunks(item, out.new_text, out.finished):
                        yield fmt.sse({**base, "choices": [chunk]})
                    continue
                item["text"] = out.new_text
                if want_logprobs:
                    item["logprobs"] = fmt.completion_logprobs(state.tokenizer, entries,
                                                               offsets[i])
                offsets[i] += len(out.new_text)
                yield fmt.sse({**base, "choices": [item]})
        except APIError as exc:
            yield fmt.sse(exc.body())
            yield fmt.SSE_DONE
            return
    if req.include_usage():
        yield fmt.sse({**base, "choices": [], "usage": fmt.total_usage(choices, len(prompt_ids))})
    yield fmt.SSE_DONE
