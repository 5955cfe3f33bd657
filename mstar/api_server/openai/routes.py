"""POST /v1/chat/completions and /v1/completions: OpenAI-compatible, streaming (SSE) or not.

A completions request may carry a batch of prompts: its choices are prompt-major, ``n`` per prompt
(choice index = prompt * n + i).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from mstar.api_server.context.served import ServedModel
from mstar.api_server.generation.choice import Choice, finish_reason
from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.run import Job, first_output, new_request_id, replay
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.openai.chat_audio import (
    SpokenChoice,
    check_chat_audio,
    reply_audio,
    speaks,
    spoken_jobs,
    spoken_message,
)
from mstar.api_server.openai.chat_output import StreamedChoice, final_message
from mstar.api_server.openai.chat_plan import OutputReading, plan_chat
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
from mstar.api_server.validation.gate import RequestGate
from mstar.api_server.validation.request_rules import (
    check_batch_size,
    check_echo,
    check_top_logprobs,
)
from mstar.output.processor import TextOutput
from mstar.output.token_bytes import TokenBytes
from mstar.prompt.value import Prompt

router = APIRouter()
PLAIN = OutputReading()  # completions: the text as it comes


@dataclass(frozen=True)
class Answer:
    """What an OpenAI response is made with besides its choices."""

    kind: str  # "chat" or "completions"
    model_name: str
    fingerprint: str
    token_bytes: TokenBytes | None  # for logprobs
    stream_interval: int

    @property
    def chat(self) -> bool:
        return self.kind == "chat"


def _answer(request: Request, kind: str) -> Answer:
    running = request.app.state.running
    return Answer(kind, request.app.state.model.name, running.fingerprint,
                  request.app.state.generation.token_bytes, running.settings.stream_interval)


@router.post("/v1/chat/completions", response_model=None,
             responses=documented(ChatCompletionResponse, GENERATION_ERRORS, "text/event-stream",
                                  ChatCompletionChunk))
async def chat_completions(req: ChatCompletionRequest, request: Request) -> Any:
    gate: RequestGate = request.app.state.gate
    generation: Generation = request.app.state.generation
    model: ServedModel = request.app.state.model
    headers = gate.admit(req, "chat", (gate.content_parts, check_top_logprobs,
                                       check_chat_audio(model)))
    plan = await plan_chat(generation, request.app.state.running.settings, req)
    return await _respond(generation, _answer(request, "chat"), request, req,
                          spoken_jobs(req, model, plan.jobs), [plan.prompt], headers,
                          plan.reading)


@router.get("/v1/models", response_model=None, responses=documented(ModelList, (401,)))
async def models(request: Request) -> Any:
    model: ServedModel = request.app.state.model
    cards = [_model_card(model, name) for name in [*model.served_names(), *model.adapters.names()]]
    return JSONResponse({"object": "list", "data": cards})


@router.get("/v1/models/{model_id:path}", response_model=None,
            responses=documented(ModelCard, (401, 404)))
async def model(model_id: str, request: Request) -> Any:
    """One served name (or alias, or MSTAR_MODEL itself): ``client.models.retrieve``."""
    request.app.state.gate.check_model(model_id)
    return JSONResponse(_model_card(request.app.state.model, model_id))


def _model_card(model: ServedModel, name: str) -> dict[str, Any]:
    """A LoRA adapter's card has the base model as ``parent`` and its path as ``root`` (vLLM's
    shape); a base name's has no parent."""
    adapter = model.adapter_of(name)
    return {"id": name, "object": "model", "created": model.created, "owned_by": "mstar",
            "root": model.name if adapter is None else model.adapters.paths[adapter],
            "parent": None if adapter is None else model.name,
            "max_model_len": model.max_model_len, "modalities": list(model.modalities)}


@router.post("/v1/completions", response_model=None,
             responses=documented(CompletionResponse, GENERATION_ERRORS, "text/event-stream",
                                  CompletionChunk))
async def completions(req: CompletionRequest, request: Request) -> Any:
    gate: RequestGate = request.app.state.gate
    generation: Generation = request.app.state.generation
    headers = gate.admit(req, "completions", (check_echo, check_batch_size))
    structured = await structured_output(req, request.app.state.running.settings)
    prompts = await generation.given_prompts(req.prompts(), "prompt")
    jobs = generation.jobs(req, prompts, "prompt", structured)
    return await _respond(generation, _answer(request, "completions"), request, req, jobs,
                          prompts, headers, PLAIN)


def _echoes(tokenizer: Any, req: Any, prompts: list[Prompt]) -> list[str] | None:
    """With echo: each choice's prompt text (as given, or decoded from token ids)."""
    if not getattr(req, "echo", False):
        return None
    texts = [p if isinstance(p, str) else tokenizer.decode(prompt.token_ids)
             for p, prompt in zip(req.prompts(), prompts, strict=True)]
    return [text for text in texts for _ in range(req.n)]


async def _respond(generation: Generation, answer: Answer, request: Request, req: Any,
                   jobs: list[Job], prompts: list[Prompt], headers: dict[str, str],
                   reading: OutputReading) -> Any:
    request_id = new_request_id("chatcmpl" if answer.chat else "cmpl")
    echoes = _echoes(generation.tokenizer, req, prompts)
    prompt_lens = [p.num_tokens for p in prompts]
    if req.stream:
        outputs = generation.run(request_id, jobs)
        first = await first_output(outputs)
        body = _stream(answer, req, request_id, prompt_lens, first, outputs, echoes, reading)
        return StreamingResponse(body, media_type="text/event-stream", headers=headers)
    choices = await generation.collect(request_id, jobs, request.is_disconnected)
    body = _final(answer, req, request_id, prompt_lens, choices, echoes, reading)
    if answer.chat and speaks(req):  # the files encode off the event loop (LAME, Opus)
        audios = await run_in_threadpool(lambda: [
            reply_audio(c, req.audio.format, body["created"]) for c in choices])
        for item, audio in zip(body["choices"], audios, strict=True):
            item["message"] = spoken_message(item["message"], audio)
    return JSONResponse(body, headers=headers)


def _final(answer: Answer, req: Any, request_id: str, prompt_lens: list[int],
           choices: list[Choice], echoes: list[str] | None, reading: OutputReading) -> dict:
    chat = answer.chat
    body = fmt.envelope(request_id, "chat.completion" if chat else "text_completion",
                        answer.model_name, fmt.now(), answer.fingerprint)
    items = []
    for i, c in enumerate(choices):
        logprobs = None
        if req.num_logprobs() is not None:
            logprobs = (fmt.chat_logprobs(answer.token_bytes, c.logprobs) if chat
                        else fmt.completion_logprobs(answer.token_bytes, c.logprobs,
                                                     fmt.TextOffsets()))
        item: dict[str, Any] = {"index": i, "logprobs": logprobs, "finish_reason": c.finish_reason}
        if chat:
            item["message"], item["finish_reason"] = final_message(reading, c.text,
                                                                   c.finish_reason)
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


async def _stream(answer: Answer, req: Any, request_id: str, prompt_lens: list[int],
                  first: tuple[int, TextOutput], outputs: AsyncIterator,
                  echoes: list[str] | None, reading: OutputReading) -> AsyncIterator[bytes]:
    chat = answer.chat
    base = fmt.envelope(request_id, "chat.completion.chunk" if chat else "text_completion",
                        answer.model_name, fmt.now(), answer.fingerprint)
    total = len(prompt_lens) * req.n
    choices = [Choice() for _ in range(total)]
    streamed = [StreamedChoice(reading) for _ in range(total)]
    spoken = ([SpokenChoice(reading, base["created"]) for _ in range(total)]
              if chat and speaks(req) else None)
    want_logprobs = req.num_logprobs() is not None
    offsets = [fmt.TextOffsets(len(text)) for text in echoes] if echoes else [
        fmt.TextOffsets() for _ in range(total)]
    for event in _opening_events(base, total, chat, echoes):
        yield framing.sse(event)

    async with aclosing(outputs):
        try:
            async for i, out in fmt.coalesce(replay(first, outputs), answer.stream_interval):
                choices[i].add(out)
                item: dict[str, Any] = {"index": i, "logprobs": None,
                                        "finish_reason": finish_reason(out)}
                entries = out.logprobs or []
                if chat:
                    if want_logprobs:
                        item["logprobs"] = fmt.chat_logprobs(answer.token_bytes, entries)
                    chunks = (spoken[i].chunks(item, out) if spoken is not None
                              else streamed[i].chunks(item, out.new_text, out.finished))
                    for chunk in chunks:
                        yield framing.sse({**base, "choices": [chunk]})
                    continue
                item["text"] = out.new_text
                if want_logprobs:
                    item["logprobs"] = fmt.completion_logprobs(answer.token_bytes, entries,
                                                               offsets[i])
                yield framing.sse({**base, "choices": [item]})
        except APIError as exc:
            yield framing.sse(exc.body())
            yield framing.SSE_DONE
            return
    if req.include_usage():
        yield framing.sse({**base, "choices": [], "usage": fmt.total_usage(choices, prompt_lens)})
    yield framing.SSE_DONE
