"""The published schema of POST /v1/messages: the message, the stream events and Anthropic's error
shape (documentation only: the route builds its JSON directly, and the fuzz test checks real
responses against these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mstar.api_server.http.openapi import ERROR_MEANINGS, GENERATION_ERRORS
from mstar.api_server.http.sse_schema import typed_event_schema

EVENTS = (
    "Server-sent events, each `event: <type>` with a JSON `data` object holding `type`: "
    "message_start (the message without content), then per content block content_block_start, "
    "content_block_delta... (text_delta, input_json_delta for tool_use, thinking_delta) and "
    "content_block_stop; then message_delta (stop_reason, stop_sequence, usage.output_tokens) "
    "and message_stop. A failure midway is an `error` event, and the stream ends.")


class MessageStreamEvent(BaseModel):
    """The ``data`` of one event: which fields it has depends on its ``type``."""

    type: Literal["message_start", "content_block_start", "content_block_delta",
                  "content_block_stop", "message_delta", "message_stop", "error"]
    message: dict[str, Any] | None = None  # message_start
    index: int | None = None  # content_block_*
    content_block: dict[str, Any] | None = None
    delta: dict[str, Any] | None = None  # content_block_delta, message_delta
    usage: dict[str, int] | None = None  # message_delta
    error: dict[str, Any] | None = None  # error


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str
    param: str | None = Field(None, description="mstar's extra: the dotted path of the field "
                              "to blame, if one is.")


class AnthropicError(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorDetail


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


class AnthropicMessage(BaseModel):
    """With ``stream: true``: server-sent events instead (see the text/event-stream content)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]  # text, tool_use and thinking blocks
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: AnthropicUsage


class TokenCount(BaseModel):
    input_tokens: int = Field(description="The prompt's tokens, chat template and tools included.")


def _doc() -> dict[int | str, dict[str, Any]]:
    ok = {"model": AnthropicMessage, "content": {"text/event-stream": {
        "schema": typed_event_schema(MessageStreamEvent, EVENTS)}}}
    return {200: ok, **_errors()}


def _errors() -> dict[int | str, dict[str, Any]]:
    return {status: {"model": AnthropicError, "description": ERROR_MEANINGS[status]}
            for status in GENERATION_ERRORS}


MESSAGES_DOC = _doc()
COUNT_TOKENS_DOC: dict[int | str, dict[str, Any]] = {200: {"model": TokenCount}, **_errors()}
