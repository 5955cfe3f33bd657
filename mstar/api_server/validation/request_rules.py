"""Rules on a validated request that its types cannot say: one function per rule, each a 400
naming the field (``param`` is its dotted path).

The rules read requests through the protocols below (the fields they check), not through the API
models: the APIs sit above validation and say which rules their requests get (``gate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.parts import AUDIO_TYPE, audio_parts, image_parts, message_dicts
from mstar.api_server.validation.field_table import Endpoint, rejected_field

MAX_PROMPTS = 1024  # choices (prompts x n) in one batch request


Rule = Callable[[Any], None]  # one rule on a request: raises APIError


class SamplingRequest(Protocol):
    """The sampling fields every generation request has (``openai.protocol.SamplingFields``)."""

    model_fields_set: set[str]
    stream: bool | None
    stream_options: Any
    logit_bias: dict[str, float] | None
    stop_token_ids: list[int] | None



class ChatRequest(Protocol):
    messages: list[Any]  # each with ``content``: a string, or parts with ``type`` and ``text``
    logprobs: Any
    top_logprobs: int | None


class EchoRequest(Protocol):
    echo: bool
    logprobs: int | None


class PromptBatch(Protocol):
    n: int

    def prompts(self) -> list[Any]: ...


def check_rejected_fields(req: Any, endpoint: Endpoint) -> None:
    values = {name: getattr(req, name) for name in req.model_fields_set}
    row = rejected_field(endpoint, values)
    if row is not None:
        raise APIError(400, f"`{row.name}` is not supported: {row.note}", row.name)


def check_content_parts(req: ChatRequest, accepts_images: bool = False,
                        max_images: int = 0, accepts_audio: bool = False,
                        max_audio_parts: int = 0) -> None:
    if any(isinstance(msg.content, list) for msg in req.messages):
        messages = message_dicts(req.messages)
        image_parts(messages, accepts_images, max_images)
        audio_parts(messages, accepts_audio, max_audio_parts)
    for i, msg in enumerate(req.messages):
        for j, part in enumerate(msg.content if isinstance(msg.content, list) else []):
            param = f"messages.{i}.content.{j}"
            if part.type in ("image_url", AUDIO_TYPE):
                continue
            if part.type != "text":
                raise APIError(400, f"`{param}`: '{part.type[:40]}' content parts are not supported "
                               "(the model takes text only)", param)
            if part.text is None:
                raise APIError(400, f"`{param}`: a text part needs 'text'", f"{param}.text")


def check_top_logprobs(req: ChatRequest) -> None:
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")


def check_stream_options(req: SamplingRequest) -> None:
    if req.stream_options is not None and not req.stream:
        raise APIError(400, "stream_options is only allowed when stream is true",
                       "stream_options")


def check_echo(req: EchoRequest) -> None:
    if req.echo and req.logprobs is not None:
        raise APIError(400, "echo with logprobs is not supported (prompt logprobs are not "
                       "computed)", "echo")


def check_batch_size(req: PromptBatch) -> None:
    choices = len(req.prompts()) * req.n
    if choices > MAX_PROMPTS:
        raise APIError(400, f"prompts x n = {choices} choices; at most {MAX_PROMPTS} per request",
                       "n")


def check_token_ids(req: SamplingRequest, vocab_size: int) -> None:
    """logit_bias keys and stop_token_ids must be ids of the vocabulary."""
    for key in req.logit_bias or {}:
        if not (key.isascii() and key.isdigit() and len(key) <= 10 and int(key) < vocab_size):
            raise APIError(400, f"logit_bias key {key!r} is not a token id in [0, {vocab_size})",
                           f"logit_bias.{key}")
    for i, token in enumerate(req.stop_token_ids or []):
        if token >= vocab_size:
            raise APIError(400, f"stop_token_ids[{i}]={token} is not a token id in "
                           f"[0, {vocab_size})", f"stop_token_ids.{i}")


def check_request(req: Any, endpoint: Endpoint | None, vocab_size: int,
                  rules: tuple[Rule, ...] = ()) -> None:
    """Every rule that applies to this request (endpoint None: the native /generate): the
    endpoint's rejected fields, ``rules`` (those of the request's kind), then the common ones."""
    if endpoint is not None:
        check_rejected_fields(req, endpoint)
    for rule in rules:
        rule(req)
    check_stream_options(req)
    check_token_ids(req, vocab_size)
