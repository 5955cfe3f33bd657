"""OpenAI response pieces: usage, logprobs and stream coalescing (the SSE framing is
``http.framing``; per-choice accumulation is ``generation.choice``)."""

from __future__ import annotations

import codecs
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from mstar.api_server.generation.choice import Choice
from mstar.engine.request.outputs import AudioChunk, TokenLogprob
from mstar.output.processor import TextOutput
from mstar.output.token_bytes import TokenBytes


async def coalesce(outputs: AsyncIterator[tuple[int, TextOutput]], interval: int
                   ) -> AsyncIterator[tuple[int, TextOutput]]:
    """Merge each choice's outputs until it has ``interval`` new tokens or finishes
    (MSTAR_STREAM_INTERVAL): fewer, larger stream events; the merged output is the last one with
    the tokens, text, logprobs and audio (speech out) of all."""
    pending: dict[int, TextOutput] = {}
    async for i, out in outputs:
        prev = pending.pop(i, None)
        if prev is not None:
            out = msgspec.structs.replace(
                out, new_token_ids=prev.new_token_ids + out.new_token_ids,
                new_text=prev.new_text + out.new_text,
                logprobs=(prev.logprobs or []) + (out.logprobs or []) or None,
                new_audio=joined_audio(prev.new_audio, out.new_audio))
        if out.finished or len(out.new_token_ids) >= interval:
            yield i, out
        else:
            pending[i] = out


def joined_audio(first: AudioChunk | None, then: AudioChunk | None) -> AudioChunk | None:
    """Two outputs' audio as one chunk (speech out), in order."""
    if first is None or then is None:
        return then if first is None else first
    return AudioChunk(first.samples + then.samples, then.rate)


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


def chat_logprobs(vocab: TokenBytes, entries: list[TokenLogprob]) -> dict[str, Any]:
    """Chat's logprobs: each token's exact bytes, shown as OpenAI shows them."""
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        return {"token": vocab.shown(token_id), "logprob": logprob,
                "bytes": list(vocab.of(token_id))}

    return {"content": [{**entry(e.token_id, e.logprob),
                         "top_logprobs": [entry(tid, lp) for tid, lp in e.top]}
                        for e in entries]}


def top_logprobs_dict(vocab: TokenBytes, e: TokenLogprob) -> dict[str, float]:
    """Completions' legacy {token: logprob} dict, every entry kept: the chosen token keys its own
    shown text, each other token the first free of its shown text and ``<shown>#<token id>``."""
    out: dict[str, float] = {}
    chosen = next((lp for tid, lp in e.top if tid == e.token_id), None)
    if chosen is not None:
        out[vocab.shown(e.token_id)] = chosen
    for tid, lp in e.top:
        if tid == e.token_id:
            continue
        key = vocab.shown(tid)
        out[key if key not in out else f"{key}#{tid}"] = lp
    return out


class TextOffsets:
    """Completions' ``text_offset``: where each token starts, in characters of the text so far
    (a token holding the rest of a character starts after it)."""

    def __init__(self, start: int = 0) -> None:
        self.chars = start
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def advance(self, data: bytes) -> int:
        """The offset of a token with these bytes; moves past them."""
        at = self.chars
        self.chars += len(self._utf8.decode(data))
        return at


def completion_logprobs(vocab: TokenBytes, entries: list[TokenLogprob],
                        offsets: TextOffsets) -> dict[str, Any]:
    return {"tokens": [vocab.shown(e.token_id) for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [top_logprobs_dict(vocab, e) for e in entries],
            "text_offset": [offsets.advance(vocab.of(e.token_id)) for e in entries]}


def total_usage(choices: list[Choice], prompt_lens: list[int]) -> dict[str, Any]:
    """Each prompt counts once, whatever n; its cached tokens are those of its choice that found
    the fewest (choices are prompt-major: n per prompt)."""
    n = len(choices) // len(prompt_lens)
    cached = sum(min(c.cached_tokens for c in choices[k * n:(k + 1) * n])
                 for k in range(len(prompt_lens)))
    return usage(sum(prompt_lens), sum(len(c.token_ids) for c in choices), cached)
