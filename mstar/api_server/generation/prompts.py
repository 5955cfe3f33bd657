"""Prompt token ids of a request; ``facade.Generation`` computes them off the event loop.

Rendering the chat template and tokenizing a multi-MB prompt take seconds, so both run in a worker
thread (``asyncio.to_thread``) and ``/health`` and running streams stay responsive. A fast
tokenizer's Rust encoder releases the GIL while it works; what holds the GIL in proportion to the
prompt is turning the ids into a Python list and freeing the encoding, so the token count is
checked against ``max_model_len`` first (an over-long prompt never becomes a list) and the encoding
is the variant without per-token offsets and strings. Before any of that, a text longer than
MSTAR_MAX_PROMPT_CHARS is refused (``check_prompt_chars``, a 413 naming the field): every route that
tokenizes text (chat, completions, embeddings, /generate, /tokenize, images) passes through it.

Special-token text a message's content holds stays plain text (or is refused), as
MSTAR_SPECIAL_TOKENS_IN_CONTENT says: see ``special_text`` (the image path, ``image_prompt``, uses
the same functions).
"""

from __future__ import annotations

from typing import Any

from mstar.api_server.generation.special_text import encode_marked, refuse_special_text
from mstar.api_server.http.bounds import check_prompt_chars
from mstar.api_server.http.errors import APIError
from mstar.api_server.tools.template import template_inputs
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import check_pooled_prompt_fits, check_prompt_fits
from mstar.prompt.special_text import mark_special_contents, unmarked_chars


def chat_prompt_ids(tokenizer: Any, settings: Any, max_model_len: int, messages: list[Any],
                    tools: list[dict] | None, template_kwargs: dict[str, Any]) -> list[int]:
    """The token ids of a chat request's ``messages`` (validated, ``openai.chat_protocol``).
    ``tools``: the OpenAI tool objects the model is shown (see ``tools.plan``);
    ``template_kwargs``: more chat-template arguments (see ``reasoning.plan``)."""
    rendered, extra = template_inputs(messages, tools, tokenizer.chat_template)
    # a continued final message (an Anthropic prefill) is left open: no new assistant turn
    opens_turn = not template_kwargs.get("continue_final_message", False)
    text, contents = render_chat(tokenizer, settings, messages, rendered, extra, opens_turn,
                                 template_kwargs)
    if not contents:
        return encode(tokenizer, text, False, max_model_len, "messages")
    ids = encode_marked(tokenizer, text, contents)
    check_prompt_len(len(ids), max_model_len, "messages")
    return ids


def render_chat(tokenizer: Any, settings: Any, given: list[Any], messages: list[dict],
                extra: dict[str, Any], add_generation_prompt: bool,
                template_kwargs: dict[str, Any] | None = None) -> tuple[str, dict[str, str]]:
    """The chat template over ``messages`` (made from the request's ``given`` messages), and the
    contents that hold special-token text, each at its marker (``special_text``): tokenize with
    ``encode_marked`` when there are any."""
    contents: dict[str, str] = {}
    if settings.special_tokens_in_content == "reject":
        refuse_special_text(tokenizer, [msg.text() for msg in given])
    else:
        messages, contents = mark_special_contents(tokenizer, messages)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=add_generation_prompt, **extra,
                                             **(template_kwargs or {}))
    except Exception as exc:  # a template may reject e.g. a role order it does not support
        raise APIError(400, f"cannot apply the chat template: {exc}", "messages") from exc
    check_prompt_chars(unmarked_chars(text, contents), settings.max_prompt_chars, "messages")
    return text, contents


def batch_field(name: str, k: int, count: int) -> str:
    """The field an error about item ``k`` of a batch names: ``name``, or ``name.k``."""
    return f"{name}.{k}" if count > 1 else name


def given_prompt_ids(tokenizer: Any, max_chars: int, max_model_len: int,
                     prompt: str | list[int], param: str, pooled: bool = False) -> list[int]:
    """The token ids of one prompt given as text or as ids (a completion's ``prompt``, or an
    embedding's ``input``: ``pooled``), every limit checked; an error names ``param``."""
    if isinstance(prompt, str):
        check_prompt_chars(len(prompt), max_chars, param)
        return encode(tokenizer, prompt, True, max_model_len, param, pooled)
    check_prompt_ids(prompt, len(tokenizer), param)
    check_prompt_len(len(prompt), max_model_len, param, pooled)
    return list(prompt)


def check_prompt_ids(ids: list[int], vocab: int, param: str) -> None:
    """Each id is one of the tokenizer's: the first one outside [0, vocab) is a 400 naming its
    index (``input.0.5``). Ids from another tokenizer (tiktoken's, which LangChain's
    OpenAIEmbeddings sends) below ``vocab`` cannot be told apart: they are read as this model's
    tokens (docs/openai_api.rst, Embeddings)."""
    for k, token in enumerate(ids):
        if not 0 <= token < vocab:
            raise APIError(400, f"`{param}.{k}`: token id {token} is not in this model's "
                           f"vocabulary [0, {vocab}) (ids of another tokenizer?)", f"{param}.{k}")


def encode(tokenizer: Any, text: str, add_special_tokens: bool, max_model_len: int,
           param: str, pooled: bool = False) -> list[int]:
    """``tokenizer.encode(text)``, refusing a prompt that leaves no room for output (``pooled``:
    an embedding input, which needs none)."""
    if not tokenizer.is_fast:
        ids = tokenizer.encode(text, add_special_tokens=add_special_tokens)
        check_prompt_len(len(ids), max_model_len, param, pooled)
        return ids
    num_tokens, ids = _fast_encode(tokenizer, text, add_special_tokens,
                                   max_model_len + 1 if pooled else max_model_len)
    check_prompt_len(num_tokens, max_model_len, param, pooled)
    return ids


def _fast_encode(tokenizer: Any, text: str, add_special_tokens: bool,
                 max_model_len: int) -> tuple[int, list[int]]:
    """The token count, and the ids when they fit.

    The Rust call transformers' fast tokenizer makes, in its variant without offsets: freeing a
    full Encoding of a million tokens holds the GIL for a quarter of a second, this one for a few
    milliseconds. It is freed here, in this thread, not wherever an exception would carry it.
    """
    encoding = tokenizer.backend_tokenizer.encode_batch_fast(
        [text], add_special_tokens=add_special_tokens)[0]
    num_tokens = len(encoding)
    return num_tokens, encoding.ids if num_tokens < max_model_len else []


def check_prompt_len(num_tokens: int, max_model_len: int, param: str,
                     pooled: bool = False) -> None:
    check = check_pooled_prompt_fits if pooled else check_prompt_fits
    try:
        check(num_tokens, max_model_len, param)
    except RequestRejected as exc:
        raise APIError(400, str(exc), exc.param) from exc
