"""POST /v1/messages: Anthropic's Messages API, streaming (typed server-sent events) or not.

A request is translated into a chat request (``translate``) and generated as chat is; its output
is read back as text and tool calls (``PieceReader``) and turned into content blocks and events
(``output``). Streaming and non-streaming answers come from the same event sequence. Every error
on this route, a request that does not validate included, is in Anthropic's shape.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute

from mstar.api_server.anthropic import translate
from mstar.api_server.anthropic.docs import COUNT_TOKENS_DOC, MESSAGES_DOC
from mstar.api_server.anthropic.output import ContentBlocks, Event, event
from mstar.api_server.anthropic.protocol import CountTokensRequest, MessagesRequest
from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.run import first_output, new_request_id, replay
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError, anthropic_error_body, validation_error
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.openai.chat_plan import (
    ChatPlan,
    PieceReader,
    ReasoningText,
    plan_translated,
)
from mstar.api_server.tools.parsers.calls import Piece, ToolCall
from mstar.engine.request.outputs import RequestOutput


class AnthropicRoute(APIRoute):
    """A route whose errors (invalid body, APIError) are answered in Anthropic's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                err = validation_error(exc, exc.body)
            except APIError as exc:
                err = exc
            return JSONResponse(anthropic_error_body(err.status, err.message, err.param),
                                status_code=err.status)

        return answer


router = APIRouter(route_class=AnthropicRoute)


@router.post("/v1/messages", response_model=None, responses=MESSAGES_DOC)
async def messages(req: MessagesRequest, request: Request) -> Any:
    generation: Generation = request.app.state.generation
    settings = request.app.state.running.settings
    headers = request.app.state.gate.admit_fields(req, "messages", translate.check_request)
    plan = await plan_translated(generation, settings, translate.to_chat(req))
    message_id = new_request_id("msg").replace("-", "_")
    shell = {"id": message_id, "type": "message", "role": "assistant", "model": req.model,
             "content": [], "stop_reason": None, "stop_sequence": None}
    reading = Reading(generation.tokenizer, settings.stream_interval)
    if req.stream:
        outputs = generation.run(message_id, plan.jobs)
        first = await first_output(outputs)
        events = _events(reading, req, plan, shell, replay(first, outputs))
        return StreamingResponse(_sse(events), media_type="text/event-stream", headers=headers)
    outputs = generation.run(message_id, plan.jobs, request.is_disconnected)
    async with aclosing(_events(reading, req, plan, shell, outputs)) as events:
        final = [data for kind, data in [e async for e in events] if kind == "message_final"]
    return JSONResponse(final[-1]["message"] if final else shell, headers=headers)


@router.post("/v1/messages/count_tokens", response_model=None, responses=COUNT_TOKENS_DOC)
async def count_tokens(req: CountTokensRequest, request: Request) -> Any:
    """The prompt's token count, as /v1/messages would build it (system, tools, template)."""
    generation: Generation = request.app.state.generation
    headers = request.app.state.gate.admit_fields(req, "messages", translate.check_request)
    plan = await plan_translated(generation, request.app.state.running.settings,
                                 translate.to_chat(req))
    return JSONResponse({"input_tokens": plan.prompt.num_tokens}, headers=headers)


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, int]:
    """Anthropic's counts: ``input_tokens`` are those not read from the (prefix) cache."""
    return {"input_tokens": prompt_tokens - cached_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached_tokens, "cache_creation_input_tokens": 0}


def matched_stop(tokenizer: Any, token_ids: list[int], stops: list[str]) -> str | None:
    """The stop sequence that ended the output, if one did: the one the generated tokens' text
    holds first (the returned text stops before it)."""
    if not stops:
        return None
    text = tokenizer.decode(token_ids, skip_special_tokens=True)
    found = [(at, stop) for stop in stops if (at := text.find(stop)) != -1]
    return min(found)[1] if found else None


def stop_reason(finish: str | None, called: bool, stop_sequence: str | None) -> str:
    if finish == "length":
        return "max_tokens"
    if called:
        return "tool_use"
    return "stop_sequence" if stop_sequence is not None else "end_turn"


@dataclass(frozen=True)
class Reading:
    """What the events are read with: the tokenizer (the matched stop sequence), and how many
    tokens an event waits for."""

    tokenizer: Any
    stream_interval: int


async def _events(reading: Reading, req: MessagesRequest, plan: ChatPlan, shell: dict[str, Any],
                  outputs: AsyncIterator[tuple[int, RequestOutput]]) -> AsyncIterator[Event]:
    """message_start ... message_stop, then (not sent) ``message_final`` with the whole message."""
    blocks = ContentBlocks()
    reader = PieceReader(plan.reading)
    token_ids: list[int] = []
    cached, finish, finished = 0, None, False
    yield event("message_start", message={**shell, "usage": usage(plan.prompt.num_tokens, 0, 0)})
    async with aclosing(outputs):
        async for _, out in fmt.coalesce(outputs, reading.stream_interval):
            token_ids += out.new_token_ids
            cached = out.num_cached_tokens
            for piece in reader.read(out.new_text, out.finished):
                for e in _piece_events(blocks, piece):
                    yield e
            finished, finish = out.finished, out.finish_reason
    if not finished:  # the client went away
        return
    for e in blocks.close():
        yield e
    stop = matched_stop(reading.tokenizer, token_ids, req.stop_sequences or []) \
        if finish == "stop" and not reader.calls else None
    reason = stop_reason(finish, reader.calls > 0, stop)
    counts = usage(plan.prompt.num_tokens, len(token_ids), cached)
    yield event("message_delta", delta={"stop_reason": reason, "stop_sequence": stop},
                usage={"output_tokens": counts["output_tokens"]})
    yield event("message_stop")
    yield event("message_final", message={**shell, "content": blocks.blocks, "stop_reason": reason,
                                          "stop_sequence": stop, "usage": counts})


def _piece_events(blocks: ContentBlocks, piece: Piece | ReasoningText) -> list[Event]:
    if isinstance(piece, ReasoningText):
        return blocks.thinking(piece.text)
    return blocks.call(piece) if isinstance(piece, ToolCall) else blocks.text(piece)


async def _sse(events: AsyncIterator[Event]) -> AsyncIterator[bytes]:
    """The events as server-sent events; a failure midway is a last ``error`` event."""
    async with aclosing(events):
        try:
            async for kind, data in events:
                if kind != "message_final":
                    yield framing.named_sse(kind, data)
        except APIError as exc:
            yield framing.named_sse("error", anthropic_error_body(exc.status, exc.message, exc.param))
