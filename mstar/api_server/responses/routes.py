"""POST /v1/responses, and GET and DELETE /v1/responses/{id} for stored responses.

A request is translated into a chat request (``translate``) and generated as chat is; its output
is read back as text and tool calls (``PieceReader``) and turned into output items and events
(``output``). Streaming and non-streaming answers come from the same event sequence: without
``stream`` only the last event's response is returned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.run import first_output, new_request_id, replay
from mstar.api_server.http import framing
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.keys_auth import presented_key
from mstar.api_server.openai import formatting as fmt
from mstar.api_server.openai.chat_plan import (
    ChatPlan,
    PieceReader,
    ReasoningText,
    plan_translated,
)
from mstar.api_server.responses import translate
from mstar.api_server.responses.docs import CREATE_DOC, DELETE_DOC, GET_DOC, INPUT_ITEMS_DOC
from mstar.api_server.responses.input_items import InputItemsQuery, page
from mstar.api_server.responses.kept import read_items
from mstar.api_server.responses.objects import as_input, response_object, usage
from mstar.api_server.responses.output import OutputItems
from mstar.api_server.responses.protocol import InputItem, ResponsesRequest
from mstar.api_server.responses.store import ResponseStore, StoredResponse, owner_of
from mstar.api_server.tools.parsers.calls import Piece, ToolCall
from mstar.engine.request.outputs import RequestOutput

router = APIRouter()


def _owner(request: Request) -> str:
    return owner_of(presented_key(dict(request.scope["headers"])),
                    request.app.state.running.settings.responses_store_per_key)


def _store(request: Request) -> ResponseStore:
    return request.app.state.response_store


def _not_found(response_id: str, param: str = "response_id") -> APIError:
    return APIError(404, f"no stored response with id {response_id[:80]!r} (never stored, "
                    "expired, deleted, or created with another API key)", param)


@router.post("/v1/responses", response_model=None, responses=CREATE_DOC)
async def create_response(req: ResponsesRequest, request: Request) -> Any:
    generation: Generation = request.app.state.generation
    settings = request.app.state.running.settings
    headers = request.app.state.gate.admit_fields(req, "responses", translate.check_request)
    history: list[InputItem] = []
    if req.previous_response_id is not None:
        previous = _store(request).get(_owner(request), req.previous_response_id)
        if previous is None:
            raise _not_found(req.previous_response_id, "previous_response_id")
        history = previous.conversation
    chat = translate.to_chat(req, history)
    plan = await plan_translated(generation, settings, chat, request.app.state.gate.content_parts)
    response_id = new_request_id("resp").replace("-", "_")
    keep = _keeper(request, req, response_id, history)
    shown = Shown(request.app.state.model.name, settings.stream_interval)
    if req.stream:
        outputs = generation.run(response_id, plan.jobs)
        first = await first_output(outputs)
        events = _events(shown, req, response_id, plan, replay(first, outputs), keep)
        return StreamingResponse(_sse(events), media_type="text/event-stream", headers=headers)
    outputs = generation.run(response_id, plan.jobs, request.is_disconnected)
    async with aclosing(_events(shown, req, response_id, plan, outputs, keep)) as events:
        body = [event async for event in events][-1].get("response")
    return JSONResponse(body, headers=headers)


@router.get("/v1/responses/{response_id}", response_model=None, responses=GET_DOC)
async def get_response(response_id: str, request: Request) -> Any:
    stored = _store(request).get(_owner(request), response_id)
    if stored is None:
        raise _not_found(response_id)
    return JSONResponse(stored.body)


@router.get("/v1/responses/{response_id}/input_items", response_model=None,
            responses=INPUT_ITEMS_DOC)
async def list_input_items(response_id: str, query: Annotated[InputItemsQuery, Query()],
                           request: Request) -> Any:
    stored = _store(request).get(_owner(request), response_id)
    if stored is None:
        raise _not_found(response_id)
    return JSONResponse(page(response_id, stored.inputs, query))


@router.delete("/v1/responses/{response_id}", response_model=None, responses=DELETE_DOC)
async def delete_response(response_id: str, request: Request) -> Any:
    if not _store(request).delete(_owner(request), response_id):
        raise _not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


def _keeper(request: Request, req: ResponsesRequest, response_id: str,
            history: list[InputItem]) -> Any:
    """What stores a finished response (``store: true``): its object and its conversation."""
    store, owner = _store(request), _owner(request)

    def keep(body: dict[str, Any]) -> None:
        if not req.store:
            return
        said = [item for item in map(as_input, body["output"]) if item is not None]
        given = translate.input_items(req)
        inputs = slice(len(history), len(history) + len(read_items(given)))
        store.put(owner, response_id, StoredResponse(body, [*history, *given, *said], inputs))

    return keep


@dataclass(frozen=True)
class Shown:
    """What the events show besides the output: the served model's name; how often they come."""

    model_name: str
    stream_interval: int


async def _events(shown: Shown, req: ResponsesRequest, response_id: str, plan: ChatPlan,
                  outputs: AsyncIterator[tuple[int, RequestOutput]], keep: Any
                  ) -> AsyncIterator[dict[str, Any]]:
    """The stream's events, from response.created to response.completed (or .incomplete)."""
    created = fmt.now()
    items = OutputItems()
    reader = PieceReader(plan.reading)
    opening = response_object(response_id, req, shown.model_name, created, "in_progress", [],
                              None)
    yield items.event("response.created", response=opening)
    yield items.event("response.in_progress", response=opening)
    output_tokens, cached, finish = 0, 0, None
    async with aclosing(outputs):
        async for _, out in fmt.coalesce(outputs, shown.stream_interval):
            output_tokens += len(out.new_token_ids)
            cached = out.num_cached_tokens
            for piece in reader.read(out.new_text, out.finished):
                for event in _piece_events(items, piece):
                    yield event
            if out.finished:
                finish = out.finish_reason
    if finish is None:  # the client went away: nothing to complete or keep
        return
    status = "incomplete" if finish == "length" else "completed"
    for event in items.close(status):
        yield event
    body = response_object(response_id, req, shown.model_name, created, status, items.items,
                           usage(plan.prompt.num_tokens, output_tokens, cached))
    keep(body)
    yield items.event(f"response.{status}", response=body)


def _piece_events(items: OutputItems, piece: Piece | ReasoningText) -> list[dict[str, Any]]:
    if isinstance(piece, ReasoningText):
        return items.reasoning(piece.text)
    return items.call(piece) if isinstance(piece, ToolCall) else items.text(piece)


async def _sse(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """The events as server-sent events; a failure midway is a last ``error`` event."""
    sequence = 0
    async with aclosing(events):
        try:
            async for event in events:
                sequence = event["sequence_number"] + 1
                yield framing.named_sse(event["type"], event)
        except APIError as exc:
            yield framing.named_sse("error", {"type": "error", "sequence_number": sequence,
                                          "code": exc.code, "message": exc.message,
                                          "param": exc.param})
