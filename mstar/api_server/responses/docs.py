"""The published schema of the Responses routes: response bodies, stream events and errors
(documentation only: the routes build their JSON directly, and the fuzz test checks real responses
against these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from mstar.api_server.http.openapi import GENERATION_ERRORS, documented
from mstar.api_server.http.sse_schema import typed_event_schema

EVENTS = (
    "Server-sent events, each `event: <type>` with a JSON `data` object holding `type` and "
    "`sequence_number`: response.created, response.in_progress, then per output item "
    "response.output_item.added, (message) response.content_part.added, "
    "response.output_text.delta..., response.output_text.done, response.content_part.done, "
    "(function_call) response.function_call_arguments.delta, "
    "response.function_call_arguments.done, (reasoning) response.reasoning_text.delta..., "
    "response.reasoning_text.done, then response.output_item.done; last response.completed, or "
    "response.incomplete when max_output_tokens cut it short. A failure midway is an `error` "
    "event, and the stream ends.")


EVENT_TYPES = Literal[
    "response.created", "response.in_progress", "response.output_item.added",
    "response.content_part.added", "response.output_text.delta", "response.output_text.done",
    "response.content_part.done", "response.function_call_arguments.delta",
    "response.function_call_arguments.done", "response.reasoning_text.delta",
    "response.reasoning_text.done", "response.output_item.done", "response.completed",
    "response.incomplete", "error"]


class ResponseStreamEvent(BaseModel):
    """The ``data`` of one event: which fields it has depends on its ``type``."""

    type: EVENT_TYPES
    sequence_number: int
    response: dict[str, Any] | None = None  # created, in_progress, completed, incomplete
    output_index: int | None = None
    item: dict[str, Any] | None = None  # output_item.added / .done
    item_id: str | None = None
    content_index: int | None = None
    part: dict[str, Any] | None = None  # content_part.added / .done
    delta: str | None = None
    text: str | None = None
    logprobs: list[Any] | None = None
    name: str | None = None  # function_call_arguments.done
    arguments: str | None = None
    code: str | None = None  # error
    message: str | None = None
    param: str | None = None


class OutputItem(BaseModel):
    type: Literal["message", "function_call", "reasoning"]
    id: str
    status: Literal["in_progress", "completed", "incomplete"]
    role: Literal["assistant"] | None = None
    content: list[dict[str, Any]] | None = None  # message: output_text parts
    call_id: str | None = None  # function_call
    name: str | None = None
    arguments: str | None = None
    summary: list[Any] | None = None  # reasoning


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseObject(BaseModel):
    """With ``stream: true``: server-sent events instead (see the text/event-stream content)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete"]
    background: bool
    error: None
    incomplete_details: dict[str, str] | None
    instructions: str | None
    max_output_tokens: int | None
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: dict[str, Any]
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    usage: ResponseUsage | None
    user: str | None
    metadata: dict[str, str]


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class InputItemList(BaseModel):
    object: Literal["list"]
    data: list[dict[str, Any]]  # message, function_call and function_call_output items
    first_id: str | None
    last_id: str | None
    has_more: bool


NOT_FOUND = "No stored response with this id for this API key; or (POST) an unknown model or " \
    "previous_response_id."


def _with_not_found(responses: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    return {**responses, 404: {**responses[404], "description": NOT_FOUND}}


def _create_doc() -> dict[int | str, dict[str, Any]]:
    doc = _with_not_found(documented(ResponseObject, GENERATION_ERRORS, "text/event-stream"))
    doc[200]["content"]["text/event-stream"]["schema"] = typed_event_schema(
        ResponseStreamEvent, EVENTS)
    return doc


CREATE_DOC = _create_doc()
GET_DOC = _with_not_found(documented(ResponseObject, (401, 404)))
DELETE_DOC = _with_not_found(documented(DeletedResponse, (401, 404)))
INPUT_ITEMS_DOC = _with_not_found(documented(InputItemList, (400, 401, 404)))
