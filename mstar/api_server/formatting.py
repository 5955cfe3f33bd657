"""OpenAI response pieces: usage, logprobs, SSE framing and per-choice accumulation."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from mstar.engine.outputs import RequestOutput, TokenLogprob


def sse(payload: Any) -> str:
    return f"data: {json.dumps(payload)}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def envelope(request_id: str, obj: str, model: str, created: int) -> dict[str, Any]:
    return {"id": request_id, "object": obj, "created": created, "model": model}


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

    def add(self, out: RequestOutput) -> None:
        self.text += out.new_text
        self.token_ids.extend(out.new_token_ids)
        self.logprobs.extend(out.logprobs or [])
        if out.finished:
            self.finish_reason = finish_reason(out)


def total_usage(choices: list[Choice], prompt_len: int) -> dict[str, int]:
    return usage(prompt_len, sum(len(c.token_ids) for c in choices))
