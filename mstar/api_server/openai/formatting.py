"""OpenAI response pieces: usage, logprobs, SSE framing and per-choice accumulation."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from mstar.engine.outputs import RequestOutput, TokenLogprob

_json = msgspec.json.Encoder()


def sse(payload: Any) -> bytes:
    return b"data: " + _json.encode(payload) + b"\n\n"


def json_line(payload: Any) -> bytes:
    return _json.encode(payload) + b"\n"


SSE_DONE = b"data: [DONE]\n\n"


async def coalesce(outputs: AsyncIterator[tuple[int, RequestOutput]], interval: int
                   ) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Merge each choice's outputs until it has ``interval`` new tokens or finishes
    (MSTAR_STREAM_INTERVAL): fewer, larger stream events."""
    pending: dict[int, RequestOutput] = {}
    async for i, out in outputs:
        prev = pending.pop(i, None)
        if prev is not None:
            out = msgspec.structs.replace(
                out, new_token_ids=prev.new_token_ids + out.new_token_ids,
                new_text=prev.new_text + out.new_text,
                logprobs=(prev.logprobs or []) + (out.logprobs or []) or None)
        if out.finished or len(out.new_token_ids) >= interval:
            yield i, out
        else:
            pending[i] = out


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def envelope(request_id: str, obj: str, model: str, created: int,
             system_fingerprint: str) -> dict[str, Any]:
    return {"id": request_id, "object": obj, "created": created, "model": model,
            "system_fingerprint": system_fingerprint}


def now() -> int:
    return int(time.time())


def finish_reason(out: RequestOutput) -> str | None:
    """The engine's 'abort' never reaches a client as such; it only ends an aborted stream."""
    return "stop" if out.finish_reason == "abort" else out.finish_reason


def _token(tokenizer: Any, token_id: int) -> str:
    return tokenizer.decode([token_id])


def chat_logprobs(tokenizer: Any, entries: list[TokenLogprob]) -> dict[str, Any]:
    content = []
    for e in entries:
        text = _token(tokenizer, e.token_id)
        top = [{"token": _token(tokenizer, tid), "logprob": lp,
                "bytes": list(_token(tokenizer, tid).encode())} for tid, lp in e.top]
        content.append({"token": text, "logprob": e.logprob, "bytes": list(text.encode()),
                        "top_logprobs": top})
    return {"content": content}


def completion_logprobs(tokenizer: Any, entries: list[TokenLogprob],
                        offset: int) -> dict[str, Any]:
    tokens, token_logprobs, top, offsets = [], [], [], []
    for e in entries:
        text = _token(tokenizer, e.token_id)
        tokens.append(text)
        token_logprobs.append(e.logprob)
        top.append({_token(tokenizer, tid): lp for tid, lp in e.top})
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top,
            "text_offset": offsets}


@dataclass
class Choice:
    """What one choice accumulated (non-streaming responses, usage in streams)."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    cached_tokens: int = 0

    def add(self, out: RequestOutput) -> None:
        self.cached_tokens = out.num_cached_tokens
        self.text += out.new_text
        self.token_ids.extend(out.new_token_ids)
        self.logprobs.extend(out.logprobs or [])
        if out.finished:
            self.finish_reason = finish_reason(out)


def total_usage(choices: list[Choice], prompt_lens: list[int]) -> dict[str, Any]:
    """Each prompt counts once, whatever n; its cached tokens are those of its choice that found
    the fewest (choices are prompt-major: n per prompt)."""
    n = len(choices) // len(prompt_lens)
    cached = sum(min(c.cached_tokens for c in choices[k * n:(k + 1) * n])
                 for k in range(len(prompt_lens)))
    return usage(sum(prompt_lens), sum(len(c.token_ids) for c in choices), cached)
