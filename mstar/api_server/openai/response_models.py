"""The response bodies, as the published OpenAPI schema describes them (documentation only: the
routes build their JSON directly, and a test checks real responses against these)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int] | None = None


class ChatAudioOut(BaseModel):
    """The spoken reply (``modalities: ["text", "audio"]``): ``data`` is the whole file in
    ``audio.format``, base64; ``expires_at`` is the reply's creation (nothing is kept)."""

    id: str
    data: str
    expires_at: int
    transcript: str


class ChatMessageOut(BaseModel):
    role: Literal["assistant"]
    content: str | None  # null when the reply is spoken (its text is audio.transcript)
    reasoning_content: str | None = None  # with a reasoning parser (docs/reasoning.rst)
    audio: ChatAudioOut | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatMessageOut
    logprobs: dict[str, Any] | None
    finish_reason: str | None


class ChatCompletionResponse(BaseModel):
    """With ``stream: true``: server-sent events of ``chat.completion.chunk`` objects instead."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    system_fingerprint: str  # the settings fingerprint (docs/operations.rst)
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: dict[str, Any] | None
    finish_reason: str | None


class CompletionResponse(BaseModel):
    """With ``stream: true``: server-sent events of ``text_completion`` chunks instead."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str  # the settings fingerprint (docs/operations.rst)
    choices: list[CompletionChoice]
    usage: Usage


class ChatDeltaAudio(BaseModel):
    """A spoken reply's piece: its id (on every one), a ``transcript`` delta or base64 pcm16
    ``data``; ``expires_at`` on the first and alone (with the id) on the last."""

    id: str
    data: str | None = None
    transcript: str | None = None
    expires_at: int | None = None


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    audio: ChatDeltaAudio | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: dict[str, Any] | None
    finish_reason: str | None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a chat stream (the last one, with stream_options.include_usage, has
    no choices and the usage)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChunk(BaseModel):
    """One ``data:`` event of a completions stream."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    system_fingerprint: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class GenerateChoice(BaseModel):
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None


class GenerateResponse(BaseModel):
    """With ``stream: true`` (the default): NDJSON lines instead, one per choice and step."""

    id: str
    model: str
    choices: list[GenerateChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    parent: str | None = None  # a LoRA adapter's base model (docs/lora.rst)
    max_model_len: int
    modalities: list[str]  # what a request may carry: "text", and "image" for a vision model


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None


class DetokenizeResponse(BaseModel):
    prompt: str


class HealthResponse(BaseModel):
    status: Literal["ok", "degraded"]
    # degraded: some replicas are down (still serving on the others); why each one is down
    message: str | None = None
