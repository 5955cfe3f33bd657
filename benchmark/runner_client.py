"""Streams one request to an OpenAI-compatible or mstar-native endpoint and times it.

TTFT is send -> first chunk carrying at least one token; inter-token latencies are the gaps
between consecutive token-carrying chunks; the output token count comes from the server's
usage report when it sends one (so multi-token chunks are counted right), else one per chunk.
A chat with audio out (``Target.audio``: OpenAI's ``modalities: ["text", "audio"]``) streams
its text as ``delta.audio.transcript`` (counted as tokens) and its pcm16 as base64
``delta.audio.data``: the time to the first audio bytes and their count are kept too.

The client is aiohttp on uvloop (``session``, ``run_client``). It shares the machine with the
server it measures, so its CPU is the server's loss: on the 2-core VM, httpx on asyncio's loop
took about 0.45 ms a token at one stream and 0.15 ms at 32; aiohttp on uvloop, reading a chunk
at a time, about 0.13 and 0.03 (docs/worker_loop.rst, "Served against offline at a 5 ms step").
"""

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import uvloop

from benchmark.runner_workload import RequestSpec

ENDPOINT_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}


READ_BUFSIZE = 4 << 20  # aiohttp's read buffer
MAX_LINE = 2 * READ_BUFSIZE  # a stream line can be one speech chunk's base64


def session(timeout_s: float) -> aiohttp.ClientSession:
    """The benchmarks' HTTP client: no cap on connections; ``timeout_s`` to connect and between
    reads (a request's whole stream may take longer)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    return aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0),
                                 read_bufsize=READ_BUFSIZE)


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


def _load(line: str) -> dict:
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


async def _line_batches(resp: aiohttp.ClientResponse) -> AsyncIterator[list[str]]:
    """The body's lines (their ends stripped), a batch per chunk received: one wake-up per chunk,
    not one per line as aiohttp's line reader has (at one stream a chunk is one event). A line
    over MAX_LINE bytes is a ValueError, as it was for aiohttp's reader."""
    parts: list[bytes] = []  # the start of a line not yet ended
    held = 0
    async for chunk in resp.content.iter_any():
        if b"\n" not in chunk:
            parts.append(chunk)
            held += len(chunk)
            if held > MAX_LINE:
                raise ValueError(f"a stream line over {MAX_LINE} bytes")
            continue
        lines = (b"".join([*parts, chunk]) if parts else chunk).split(b"\n")
        parts = [lines.pop()] if lines[-1] else []
        held = len(parts[0]) if parts else 0
        yield [raw.decode("utf-8", "replace").rstrip("\r") for raw in lines]
    if parts:
        yield [b"".join(parts).decode("utf-8", "replace").rstrip("\r")]


async def _read_sse(resp: aiohttp.ClientResponse, timer: _Timer) -> int:
    usage_tokens = None
    async for lines in _line_batches(resp):
        for line in lines:
            usage_tokens = _sse_line(line, timer, usage_tokens)
    return timer.chunks if usage_tokens is None else usage_tokens


def _sse_line(line: str, timer: _Timer, usage_tokens: int | None) -> int | None:
    """One line of an SSE stream: times a token-carrying event; the usage's completion tokens
    when the event reports them, else ``usage_tokens``."""
    if not line.startswith("data:"):
        return usage_tokens
    data = line[len("data:") :].strip()
    if data == "[DONE]":
        return usage_tokens
    obj = _load(data)
    usage = obj.get("usage")
    if usage and usage.get("completion_tokens") is not None:
        usage_tokens = int(usage["completion_tokens"])
    text = ""
    for choice in obj.get("choices") or []:
        delta = choice.get("delta") or {}
        audio = delta.get("audio") or {}
        content = (delta.get("content") or delta.get("reasoning_content")
                   or audio.get("transcript"))
        text += content or choice.get("text") or ""
        if audio.get("data"):
            timer.audio_chunk(len(base64.b64decode(audio["data"])))
    if text:
        timer.token_chunk()
    return usage_tokens


async def _read_ndjson(resp: aiohttp.ClientResponse, timer: _Timer) -> int:
    tokens = 0
    async for lines in _line_batches(resp):
        for line in lines:
            if not line.strip():
                continue
            obj = _load(line)
            ids = obj.get("token_ids")
            count = len(ids) if ids is not None else int(bool(obj.get("text")))
            if count:
                timer.token_chunk()
                tokens += count
    return tokens


async def send_request(
    client: aiohttp.ClientSession, target: Target, spec: RequestSpec
) -> RequestResult:
    """Send one streaming request; never raises, failures land in `result.error`."""
    result = RequestResult(index=spec.index, requested_tokens=spec.output_len)
    start = time.perf_counter()
    timer = _Timer(result, start)
    try:
        async with client.post(target.url, json=target.payload(spec),
                               headers=target.headers) as resp:
            if not 200 <= resp.status < 300:
                body = (await resp.read()).decode(errors="replace")
                raise StreamError(f"HTTP {resp.status}: {body[:300]}")
            reader = _read_ndjson if target.endpoint == "generate" else _read_sse
            result.output_tokens = await reader(resp, timer)
        if timer.chunks == 0:
            raise StreamError("stream ended without any output tokens")
    except StreamError as exc:
        result.error = str(exc)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:  # ValueError: a line
        result.error = f"{type(exc).__name__}: {exc}"  # over MAX_LINE
    result.finished_at = time.perf_counter()
    result.e2e = result.finished_at - start
    if result.error is not None:
        result.output_tokens = 0
    return result
