"""POST /tokenize and /detokenize, in the shape vLLM gives them.

/tokenize takes a ``prompt`` (special tokens added by default) or chat ``messages`` (rendered with
the chat template, generation prompt added by default) and answers the token ids, their count and
max_model_len. A text over MSTAR_MAX_PROMPT_CHARS is a 413 before any tokenizing. Tokenizing,
the token strings and the JSON encoding all run in a worker thread.
/detokenize turns token ids back into text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from mstar.api_server.generation.prompts import render_chat
from mstar.api_server.generation.special_text import encode_marked
from mstar.api_server.http.bounds import MESSAGES, Counted, check_prompt_chars
from mstar.api_server.http.errors import APIError
from mstar.api_server.http.openapi import REQUEST_ERRORS, documented
from mstar.api_server.openai.chat_protocol import ChatMessage
from mstar.api_server.openai.protocol import StrictModel, TokenId
from mstar.api_server.openai.response_models import DetokenizeResponse, TokenizeResponse
from mstar.api_server.validation.gate import RequestGate
from mstar.api_server.validation.request_rules import check_content_parts

router = APIRouter()


class TokenizeRequest(StrictModel):
    model: str | None = None
    prompt: str | None = Field(None, description="Text to tokenize (or messages).")
    messages: list[ChatMessage] | None = Field(None, min_length=1,
                                               description="Chat to render and tokenize.")
    add_special_tokens: bool | None = Field(
        None, description="Default: true for a prompt, false for messages (the template has them).")
    add_generation_prompt: bool = True
    return_token_strs: bool = False


    def counted(self) -> list[Counted]:
        return [Counted(MESSAGES, "messages", len(self.messages or []))]


class DetokenizeRequest(StrictModel):
    model: str | None = None
    tokens: list[TokenId]


def _tokenize(tokenizer: Any, settings: Any, req: TokenizeRequest) -> list[int]:
    if req.messages is None:
        add_special = True if req.add_special_tokens is None else req.add_special_tokens
        return tokenizer.encode(req.prompt, add_special_tokens=add_special)
    messages = [{"role": msg.role, "content": msg.text()} for msg in req.messages]
    text, contents = render_chat(tokenizer, settings, req.messages, messages, {},
                                 req.add_generation_prompt)
    if contents:
        return encode_marked(tokenizer, text, contents)
    return tokenizer.encode(text, add_special_tokens=bool(req.add_special_tokens))


@router.post("/tokenize", response_model=None, responses=documented(TokenizeResponse,
                                                                     REQUEST_ERRORS))
async def tokenize(req: TokenizeRequest, request: Request) -> Any:
    gate: RequestGate = request.app.state.gate
    settings = request.app.state.running.settings
    headers = gate.admit_fields(req)
    if (req.prompt is None) == (req.messages is None):
        raise APIError(400, "give exactly one of 'prompt' and 'messages'", "prompt")
    if req.messages is not None:
        check_content_parts(req)
    else:
        check_prompt_chars(len(req.prompt), settings.max_prompt_chars, "prompt")
    body = await asyncio.to_thread(_tokenize_body, request.app.state.generation.tokenizer,
                                   settings, request.app.state.model.max_model_len, req)
    return Response(body, media_type="application/json", headers=headers)


def _tokenize_body(tokenizer: Any, settings: Any, max_model_len: int,
                   req: TokenizeRequest) -> bytes:
    """The whole answer, encoded: a 40 MB prompt's token strings and their ~100 MB of JSON are
    made here, in a worker thread, never on the event loop."""
    ids = _tokenize(tokenizer, settings, req)
    strs = tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs else None
    return msgspec.json.encode({"count": len(ids), "max_model_len": max_model_len,
                                "tokens": ids, "token_strs": strs})


@router.post("/detokenize", response_model=None, responses=documented(DetokenizeResponse,
                                                                       REQUEST_ERRORS))
async def detokenize(req: DetokenizeRequest, request: Request) -> Any:
    headers = request.app.state.gate.admit_fields(req)
    tokenizer = request.app.state.generation.tokenizer
    vocab = len(tokenizer)
    for i, token in enumerate(req.tokens):
        if token >= vocab:
            raise APIError(400, f"tokens[{i}]={token} is not a token id in [0, {vocab})",
                           f"tokens.{i}")
    text = await asyncio.to_thread(tokenizer.decode, req.tokens)
    return JSONResponse({"prompt": text}, headers=headers)
