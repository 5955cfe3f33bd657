"""Rules on a validated request that its types cannot say: one function per rule, each a 400
naming the field (``param`` is its dotted path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.parts import image_parts
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.api_server.openai.completion_protocol import MAX_PROMPTS, CompletionRequest, PromptFields
from mstar.api_server.openai.protocol import SamplingFields
from mstar.api_server.state import ServerState
from mstar.api_server.validation.field_table import Endpoint, rejected_field
from mstar.api_server.validation.unknown_fields import unknown_fields


def check_rejected_fields(req: SamplingFields, endpoint: Endpoint) -> None:
    values = {name: getattr(req, name) for name in req.model_fields_set}
    row = rejected_field(endpoint, values)
    if row is not None:
        raise APIError(400, f"`{row.name}` is not supported: {row.note}", row.name)


def check_content_parts(req: ChatCompletionRequest, accepts_images: bool = False,
                        max_images: int = 0) -> None:
    image_parts(req.messages, accepts_images, max_images)
    for i, msg in enumerate(req.messages):
        for j, part in enumerate(msg.content if isinstance(msg.content, list) else []):
            param = f"messages.{i}.content.{j}"
            if part.type == "image_url":
                continue
            if part.type != "text":
                raise APIError(400, f"`{param}`: '{part.type[:40]}' content parts are not supported "
                               "(the model takes text only)", param)
            if part.text is None:
                raise APIError(400, f"`{param}`: a text part needs 'text'", f"{param}.text")


def check_top_logprobs(req: ChatCompletionRequest) -> None:
    if req.top_logprobs and not req.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")


def check_stream_options(req: SamplingFields) -> None:
    if req.stream_options is not None and not req.stream:
        raise APIError(400, "stream_options is only allowed when stream is true",
                       "stream_options")


def check_echo(req: CompletionRequest) -> None:
    if req.echo and req.logprobs is not None:
        raise APIError(400, "echo with logprobs is not supported (prompt logprobs are not "
                       "computed)", "echo")


def check_batch_size(req: PromptFields) -> None:
    choices = len(req.prompts()) * req.n
    if choices > MAX_PROMPTS:
        raise APIError(400, f"prompts x n = {choices} choices; at most {MAX_PROMPTS} per request",
                       "n")


def check_list_caps(req: SamplingFields, settings: Any) -> None:
    """At most MSTAR_MAX_STOP_STRINGS stop strings and MSTAR_MAX_LOGIT_BIAS_ENTRIES biases: each
    one costs work on every step of the request (checked before anything walks them)."""
    stops = req.stop_list()
    if len(stops) > settings.max_stop_strings:
        raise APIError(400, f"stop has {len(stops)} strings; at most {settings.max_stop_strings} "
                       "(MSTAR_MAX_STOP_STRINGS)", "stop")
    biases = len(req.logit_bias or {})
    if biases > settings.max_logit_bias_entries:
        raise APIError(400, f"logit_bias has {biases} entries; at most "
                       f"{settings.max_logit_bias_entries} (MSTAR_MAX_LOGIT_BIAS_ENTRIES)",
                       "logit_bias")


def check_token_ids(req: SamplingFields, vocab_size: int) -> None:
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
                  accepts_images: bool = False, max_images: int = 0) -> None:
    """Every rule that applies to this request (endpoint None: the native /generate)."""
    if endpoint is not None:
        check_rejected_fields(req, endpoint)
    if isinstance(req, ChatCompletionRequest):
        check_content_parts(req, accepts_images, max_images)
        check_top_logprobs(req)
    if isinstance(req, CompletionRequest):
        check_echo(req)
    if isinstance(req, PromptFields):
        check_batch_size(req)
    check_stream_options(req)
    check_token_ids(req, vocab_size)


def admit_fields(state: ServerState, req: Any, endpoint: Endpoint | None = None,
                 check: Callable[[Any], None] | None = None) -> dict[str, str]:
    """The model, the endpoint's rejected fields and ``check`` (a route's own rules), for the
    routes that do not generate through ``admit``; the response headers (unknown fields)."""
    check_model(state, req.model)
    if endpoint is not None:
        check_rejected_fields(req, endpoint)
    if check is not None:
        check(req)
    return state.unknown_fields.headers(unknown_fields(req))


def check_model(state: ServerState, model: str | None) -> None:
    if not state.serves(model):
        served = ", ".join(state.served_names())
        raise APIError(404, f"The model `{model}` does not exist; this server serves: {served}",
                       "model", code="model_not_found", kind="invalid_request_error")


def admit(state: ServerState, req: Any, endpoint: Endpoint | None) -> dict[str, str]:
    """Check a request before any work; the response headers it gets (unknown fields)."""
    check_model(state, req.model)
    check_list_caps(req, state.settings)
    check_request(req, endpoint, len(state.tokenizer), "image" in state.modalities,
                  state.settings.max_images_per_request)
    return state.unknown_fields.headers(unknown_fields(req))
