"""Streams one request to an OpenAI-compatible or mstar-native endpoint and times it.

TTFT is send -> first chunk carrying at least one token; inter-token latencies are the gaps
between consecutive token-carrying chunks; the output token count comes from the server's
usage report when it sends one (so multi-token chunks are counted right), else one per chunk.
A chat with audio out (``Target.audio``: OpenAI's ``modalities: ["text", "audio"]``) streams
its text as ``delta.audio.transcript`` (counted as tokens) and its pcm16 as base64
``delta.audio.data``: the time to the first audio bytes and their count are kept too.

The client is ``benchmark.http_stream`` on uvloop (``session``, ``run_client``): each line of
the stream is read inside the connection's callback. It shares the machine with the server it
measures, so its CPU is the server's loss (docs/worker_loop.rst, "Served against offline at a
5 ms step").
"""

import asyncio
import base64
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgspec
import uvloop

from benchmark.http_stream import HttpSession, HttpStatusError
from benchmark.runner_workload import RequestSpec

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}


def session(timeout_s: float) -> HttpSession:
    """The benchmarks' HTTP client (``benchmark.http_stream``): ``timeout_s`` to connect and
    between reads (a request's whole stream may take longer)."""
    return HttpSession(timeout_s)


def run_client(main: Coroutine[Any, Any, Any]) -> Any:
    """Run a benchmark's client on uvloop."""
    return uvloop.run(main)


class StreamError(Exception):
    """The server answered, but not with a usable token stream."""


@dataclass
class RequestResult:
    index: int
    requested_tokens: int
    error: str | None = None
    ttft: float | None = None
    e2e: float | None = None
    output_tokens: int = 0
    itls: list[float] = field(default_factory=list)
    finished_at: float = 0.0
    first_audio: float | None = None  # send -> first audio bytes (a chat with audio out)
    audio_bytes: int = 0  # the reply's audio, decoded from base64 (pcm16: 2 bytes a sample)

    @property
    def last_token(self) -> float | None:
        """Send -> the last token-carrying chunk."""
        return None if self.ttft is None else self.ttft + sum(self.itls)


@dataclass(frozen=True)
class Target:
    """Where and how to send requests; builds the JSON body for each endpoint."""

    base_url: str
    endpoint: str
    model: str
    ignore_eos: bool
    temperature: float
    api_key: str | None = None
    audio: dict | None = None  # chat only: ``{voice, format}``, asking for audio out too

    @property
    def url(self) -> str:
        return self.base_url + ENDPOINT_PATHS[self.endpoint]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def payload(self, spec: RequestSpec) -> dict:
        body: dict = {
            "max_tokens": spec.output_len,
            "temperature": self.temperature,
            "stream": True,
        }
        if self.endpoint == "generate":
            return {"prompt": spec.prompt, "ignore_eos": self.ignore_eos, **body}
        body["model"] = self.model
        body["stream_options"] = {"include_usage": True}
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": spec.prompt}]
            if self.audio is not None:
                body["modalities"], body["audio"] = ["text", "audio"], self.audio
        else:
            body["prompt"] = spec.prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = spec.output_len
        return body


class _Timer:
    """Collects chunk arrival times for one request."""

    def __init__(self, result: RequestResult, start: float):
        self.result = result
        self.start = start
        self.last: float | None = None
        self.chunks = 0

    def token_chunk(self) -> None:
        now = time.perf_counter()
        if self.last is None:
            self.result.ttft = now - self.start
        else:
            self.result.itls.append(now - self.last)
        self.last = now
        self.chunks += 1

    def audio_chunk(self, size: int) -> None:
        if self.result.first_audio is None:
            self.result.first_audio = time.perf_counter() - self.start
        self.result.audio_bytes += size


def _error_message(obj: dict) -> str | None:
    err = obj.get("error")
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _load(line: bytes) -> dict:
    try:
        obj = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise StreamError(f"malformed stream line {line[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise StreamError(f"unexpected stream line {line[:200]!r}")
    message = _error_message(obj)
    if message is not None:
        raise StreamError(f"stream error: {message}")
    return obj


class _SseReader:
    """An SSE stream's lines, one call each: times each token-carrying event; the tokens are the
    usage's completion tokens when an event reports them, else one per token-carrying event."""

    def __init__(self, timer: _Timer):
        self.timer = timer
        self.usage_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return self.timer.chunks if self.usage_tokens is None else self.usage_tokens

    def __call__(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[len(b"data:"):].strip()
        if data == b"[DONE]":
            return
        obj = _load(data)
        usage = obj.get("usage")
        if usage and usage.get("completion_tokens") is not None:
            self.usage_tokens = int(usage["completion_tokens"])
        text = ""
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            audio = delta.get("audio") or {}
            content = (delta.get("content") or delta.get("reasoning_content")
                       or audio.get("transcript"))
            text += content or choice.get("text") or ""
            if audio.get("data"):
                self.timer.audio_chunk(len(base64.b64decode(audio["data"])))
        if text:
            self.timer.token_chunk()


class _NdjsonReader:
    """mstar's native /generate stream, one JSON object a line: its ``token_ids`` counted."""

    def __init__(self, timer: _Timer):
        self.timer = timer
        self.tokens = 0

    def __call__(self, line: bytes) -> None:
        if not line.strip():
            return
        obj = _load(line)
        ids = obj.get("token_ids")
        count = len(ids) if ids is not None else int(bool(obj.get("text")))
        if count:
            self.timer.token_chunk()
            self.tokens += count


async def send_request(client: HttpSession, target: Target, spec: RequestSpec) -> RequestResult:
    """Send one streaming request; never raises, failures land in `result.error`."""
    result = RequestResult(index=spec.index, requested_tokens=spec.output_len)
    start = time.perf_counter()
    timer = _Timer(result, start)
    reader = _NdjsonReader(timer) if target.endpoint == "generate" else _SseReader(timer)
    try:
        await client.request("POST", target.url, target.headers,
                             msgspec.json.encode(target.payload(spec)), on_line=reader)
        result.output_tokens = reader.tokens
        if timer.chunks == 0:
            raise StreamError("stream ended without any output tokens")
    except (StreamError, HttpStatusError) as exc:
        result.error = str(exc)
    except (OSError, asyncio.TimeoutError, ValueError) as exc:  # ValueError: a line over
        result.error = f"{type(exc).__name__}: {exc}"  # MAX_LINE
    result.finished_at = time.perf_counter()
    result.e2e = result.finished_at - start
    if result.error is not None:
        result.output_tokens = 0
    return result
