"""POST /v1/chat/completions and /v1/completions: OpenAI-compatible, streaming (SSE) or not.

A completions request may carry a batch of prompts: its choices are prompt-major, ``n`` per prompt
(choice index = prompt * n + i).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mstar.api_server.generation.prompts import completion_prompt_ids
from mstar.api_server.generation.run import (
    Job,
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
from mstar.api_server.openai.chat_plan import plan_chat
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.api_server.openai.completion_protocol import CompletionRequest
from mstar.api_server.openai.response_models import (
    ChatCompletionChunk,
    ChatCompletionResponse,
    CompletionChunk,
    CompletionResponse,
    ModelCard,
    ModelList,
)
from mstar.api_server.openai.structured import structured_output
from mstar.api_server.state import ServerState
from mstar.api_server.tools.plan import NO_TOOLS, ToolPlan
from mstar.api_server.tools.response import StreamedChoice, final_message
from mstar.api_server.validation.request_rules import admit, check_model
from mstar.output.processor import TextOutput

router = APIRouter()


@router.post("/v1/chat/completions", response_model=None,
             responses=documented(ChatCompletionResponse, GENERATION_ERRORS, "text/event-stream",
                                  ChatCompletionChunk))
async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
    state: ServerState = request.app.state.server
    headers = admit(state, req, "chat")
    plan = await plan_chat(state, req)
    return await _respond(state, request, req, plan.jobs, [plan.prompt], headers, chat=True,
                          tools=plan.tools)


@router.get("/v1/models", response_model=None, responses=documented(ModelList, (401,)))
async def models(request: Request) -> Any:
    state: ServerState = request.app.state.server
    return JSONResponse({"object": "list",
                         "data": [_model_card(state, name) for name in state.served_names()]})


@router.get("/v1/models/{model_id:path}", response_model=None,
            responses=documented(ModelCard, (401, 404)))
async def model(model_id: str, request: Request) -> Any:
    """One served name (or alias, or MSTAR_MODEL itself): ``client.models.retrieve``."""
    state: ServerState = request.app.state.server
    check_model(state, model_id)
    return JSONResponse(_model_card(state, model_id))


def _model_card(state: ServerState, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": fmt.now(), "owned_by": "mstar",
            "root": state.model_name, "max_model_len": state.max_model_len}


@router.post("/v1/completions", response_model=None,
             responses=documented(CompletionResponse, GENERATION_ERRORS, "text/event-stream",
                                  CompletionChunk))
async def completions(req: CompletionRequest, request: Request) -> Any:
    state: ServerState = request.app.state.server
    headers = admit(state, req, "completions")
    structured = await structured_output(req, state.settings)
    prompts = await completion_prompt_ids(state, req.prompts())
    jobs = jobs_for(state, req, prompts, "prompt", structured)
    return await _respond(state, request, req, jobs, prompts, headers, chat=False)


def _echoes(state: ServerState, req: Any, prompts: list[list[int]]) -> list[str] | None:
    """With echo: each choice's prompt text (as given, or decoded from token ids)."""
    if not getattr(req, "echo", False):
        return None
    texts = [p if isinstance(p, str) else state.tokenizer.decode(ids)
             for p, ids in zip(req.prompts(), prompts, strict=True)]
    return [text for text in texts for _ in range(req.n)]


async def _respond(state: ServerState, request: Request, req: Any, jobs: list[Job],
                   prompts: list[list[int]], headers: dict[str, str], chat: bool,
                   tools: ToolPlan = NO_TOOLS) -> Any:
    request_id = new_request_id("chatcmpl" if chat else "cmpl")
    echoes = _echoes(state, req, prompts)
    prompt_lens = [len(p) for p in prompts]
    if req.stream:
        outputs = run_requests(state, request_id, jobs)
        first = await first_output(outputs)
        body = _stream(state, req, request_id, prompt_lens, first, outputs, chat, echoes, tools)
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)
    choices = await collect_choices(state, request_id, jobs, request.is_disconnected)
    body = _final(state, req, request_id, prompt_lens, choices, chat, echoes, tools)
    return JSONResponse(body, headers=headers)


def _final(state: ServerState, req: Any, request_id: str, prompt_lens: list[int],
           choices: list[fmt.Choice], chat: bool, echoes: list[str] | None,
           tools: ToolPlan) -> dict:
    body = fmt.envelope(request_id, "chat.completion" if chat else "text_completion",
                        state.model_name, fmt.now(), state.settings.fingerprint())
    items = []
    for i, c in enumerate(choices):
        logprobs = None
        if req.num_logprobs() is not None:
            logprobs = (fmt.chat_logprobs(state.token_bytes, c.logprobs) if chat
                        else fmt.completion_logprobs(state.token_bytes, c.logprobs,
                                                     fmt.TextOffsets()))
        item: dict[str, Any] = {"index": i, "logprobs": logprobs, "finish_reason": c.finish_reason}
        if chat:
            item["message"], item["finish_reason"] = final_message(tools, c.text, c.finish_reason)
        else:
            item["text"] = (echoes[i] if echoes else "") + c.text
        items.append(item)
    body["choices"] = items
    body["usage"] = fmt.total_usage(choices, prompt_lens)
    return body


def _opening_events(base: dict, n: int, chat: bool, echoes: list[str] | None
                    ) -> list[dict[str, Any]]:
    """Before any token: the assistant role of each chat choice, or each echoed prompt."""
    if chat:
        return [{**base, "choices": [{"index": i, "logprobs": None, "finish_reason": None,
                                      "delta": {"role": "assistant", "content": ""}}]}
                for i in range(n)]
    return [{**base, "choices": [{"index": i, "text": text, "logprobs": None,
                                  "finish_reason": None}]} for i, text in enumerate(echoes or [])]


async def _stream(state: ServerState, req: Any, request_id: str, prompt_lens: list[int],
                  first: tuple[int, TextOutput], outputs: AsyncIterator, chat: bool,
                  echoes: list[str] | None, tools: ToolPlan) -> AsyncIterator[bytes]:
    base = fmt.envelope(request_id, "chat.completion.chunk" if chat else "text_completion",
                        state.model_name, fmt.now(), state.settings.fingerprint())
    total = len(prompt_lens) * req.n
    choices = [fmt.Choice() for _ in range(total)]
    streamed = [StreamedChoice(tools) for _ in range(total)]
    want_logprobs = req.num_logprobs() is not None
    offsets = [fmt.TextOffsets(len(text)) for text in echoes] if echoes else [
        fmt.TextOffsets() for _ in range(total)]
    for event in _opening_events(base, total, chat, echoes):
        yield fmt.sse(event)

    async with aclosing(outputs):
        try:
            async for i, out in fmt.coalesce(replay(first, outputs), state.settings.stream_interval):
                choices[i].add(out)
                item: dict[str, Any] = {"index": i, "logprobs": None,
                                        "finish_reason": fmt.finish_reason(out)}
                entries = out.logprobs or []
                if chat:
                    if want_logprobs:
                        item["logprobs"] = fmt.chat_logprobs(state.token_bytes, entries)
                    for chunk in streamed[i].chunks(item, out.new_text, out.finished):
                        yield fmt.sse({**base, "choices": [chunk]})
                    continue
                item["text"] = out.new_text
                if want_logprobs:
                    item["logprobs"] = fmt.completion_logprobs(state.token_bytes, entries,
                                                               offsets[i])
                yield fmt.sse({**base, "choices": [item]})
        except APIError as exc:
            yield fmt.sse(exc.body())
            yield fmt.SSE_DONE
            return
    if req.include_usage():
        yield fmt.sse({**base, "choices": [], "usage": fmt.total_usage(choices, prompt_lens)})
    yield fmt.SSE_DONE
