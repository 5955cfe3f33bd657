"""A client that reads its stream slowly is bounded (issue 33): output waiting for it past
MSTAR_MAX_UNREAD_OUTPUT_KB aborts the request instead of being buffered, and
MSTAR_REQUEST_TIMEOUT_S ends it, the worker's work aborted at the deadline whether or not the
client reads. In process on a flooding stub engine, then served with a 1 KiB/s reader."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from api_stub import StubEngine, stub_app
from serve_helpers import hard_timeout, wait_running  # noqa: F401 (hard_timeout: autouse)

from mstar.output.processor import TextOutput

FLOOD = 2000  # outputs of 100 characters: ~200 KiB, and more with the per-token estimate
MESSAGES = [{"role": "user", "content": "hi"}]


class FloodingEngine(StubEngine):
    """Every output of a request queued at once (a fast worker, a client not reading yet); the
    sub-requests it was asked to abort in ``aborted``."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted: list[str] = []

    def submit(self, requests: list, sink) -> None:
        for rid, prompt, _ in requests:
            for k in range(FLOOD):
                sink.put_nowait(TextOutput(rid, [5], finished=k == FLOOD - 1,
                                            finish_reason="length" if k == FLOOD - 1 else None,
                                            num_prompt_tokens=prompt.num_tokens,
                                            num_output_tokens=k + 1, new_text="a" * 100))

    def abort(self, request_ids: list) -> None:
        self.aborted += request_ids


def _stream(tiny_tokenizer, **settings):
    from starlette.testclient import TestClient

    engine = FloodingEngine()
    app, _ = stub_app(tiny_tokenizer, engine, **settings)
    response = TestClient(app).post("/v1/chat/completions", json={
        "messages": MESSAGES, "max_tokens": 100, "stream": True})
    return response, engine


def test_output_past_the_unread_bound_aborts_the_request(tiny_tokenizer):
    response, engine = _stream(tiny_tokenizer, max_unread_output_kb=64)
    assert response.status_code == 503, response.text[:300]
    assert "MSTAR_MAX_UNREAD_OUTPUT_KB" in response.json()["error"]["message"]
    assert len(set(engine.aborted)) == 1  # its one choice, aborted in the worker


def test_output_within_the_unread_bound_is_all_streamed(tiny_tokenizer):
    response, engine = _stream(tiny_tokenizer, max_unread_output_kb=4096)
    assert response.status_code == 200
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                   for line in response.text.splitlines()
                   if line.startswith("data: {") and json.loads(line[6:])["choices"])
    assert len(text) == 100 * FLOOD
    assert engine.aborted == []


class SilentEngine(StubEngine):
    """A worker that never answers (stalled): no output ever comes."""

    def submit(self, requests: list, sink) -> None:
        pass


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_whose_engine_never_answers_ends_at_the_request_timeout(tiny_tokenizer,
                                                                          stream):
    """No output arrives to wake the reader: the pump's deadline does (a 504, in time)."""
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer, SilentEngine(), request_timeout_s=0.5)
    start = time.perf_counter()
    response = TestClient(app).post("/v1/chat/completions", json={
        "messages": MESSAGES, "max_tokens": 4, "stream": stream})
    assert response.status_code == 504, response.text[:300]
    assert "request_timeout_s=0.5" in response.json()["error"]["message"]
    assert time.perf_counter() - start < 10


TIMEOUT_S = 4.0  # long enough for the output to fill every buffer on the way
# Sequences of 16000 tokens on the long-context model: work that outlasts the timeout on any
# machine (32 x 480 tokens of the tiny model ended within 4 s on a quiet one).
CHOICES, MAX_TOKENS = 32, 16000


@pytest.fixture(scope="module")
def server(long_model_dir, tmp_path_factory):
    from serve_helpers import running_server

    yield from running_server(long_model_dir, tmp_path_factory.mktemp("slow") / "s.log",
                              {"MSTAR_REQUEST_TIMEOUT_S": str(TIMEOUT_S),
                               "MSTAR_MAX_UNREAD_OUTPUT_KB": "65536"})  # the timeout cuts


def _slow_read(sock: socket.socket, received: bytearray, stop: threading.Event) -> None:
    """Read 1 KiB per second until ``stop`` or the end of the stream."""
    while not stop.is_set():
        chunk = sock.recv(1024)
        if not chunk:
            return
        received += chunk
        time.sleep(1.0)


def test_a_slow_reader_is_ended_at_the_request_timeout_and_its_blocks_freed(server):
    # ~3 KiB of logprobs per token: the output fills the kernel's and the server's buffers well
    # before the deadline, so that the server waits on the reader.
    body = json.dumps({"messages": MESSAGES, "max_tokens": MAX_TOKENS, "n": CHOICES, "stream": True,
                       "ignore_eos": True, "logprobs": True, "top_logprobs": 20}).encode()
    generated = server.metric("mstar_generation_tokens_total")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # little room for the kernel
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    started = time.monotonic()
    received, stop = bytearray(), threading.Event()
    reader = threading.Thread(target=_slow_read, args=(sock, received, stop), daemon=True)
    reader.start()
    try:
        wait_running(server, CHOICES, timeout_s=TIMEOUT_S)  # generating, read slowly
        time.sleep(max(0.0, started + TIMEOUT_S + 1.0 - time.monotonic()))
        # At the deadline the worker's work was aborted: within 1 s, nothing runs or holds KV.
        assert server.metric("mstar_num_requests_running") == 0
        assert server.metric("mstar_kv_cache_usage_ratio") == 0
        cut = server.metric("mstar_generation_tokens_total") - generated
        assert cut < 0.8 * CHOICES * MAX_TOKENS, cut  # aborted, not run to its end
    finally:
        stop.set()
        reader.join(5)
    sock.settimeout(10)
    while not received.endswith(b"0\r\n\r\n"):  # the rest, read fast: it ends
        chunk = sock.recv(65536)
        assert chunk, "closed before the end of the stream"
        received += chunk
    sock.close()
    assert b"request timed out after request_timeout_s=4" in received
    assert received.count(b'"finish_reason":"length"') == 0  # cut, not run to its end
