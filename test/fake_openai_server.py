"""An in-process fake OpenAI-compatible server for the benchmark runner's tests.

Streams a fixed token per chunk with a small sleep; counts and answers as the test state says.
"""

import asyncio
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

REPO = Path(__file__).resolve().parents[1]
TOKEN_SLEEP_S = 0.004
EOS_AFTER = 3  # the fake "model" emits EOS after this many tokens unless ignore_eos


def _fresh_state() -> dict:
    return {
        "inflight": 0,
        "max_inflight": 0,
        "count": 0,
        "bodies": [],
        "fail_every": 0,
        "tokens_per_chunk": 1,
        "usage": True,
        "models": True,
    }


def make_app(state: dict) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        if not state["models"]:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    def admit(body: dict) -> JSONResponse | None:
        state["bodies"].append(body)
        state["count"] += 1
        if state["fail_every"] and state["count"] % state["fail_every"] == 0:
            return JSONResponse({"error": {"message": "injected failure"}}, status_code=500)
        state["inflight"] += 1
        state["max_inflight"] = max(state["max_inflight"], state["inflight"])
        return None

    def chunks(body: dict) -> list[int]:
        n = body["max_tokens"] if body.get("ignore_eos") else min(body["max_tokens"], EOS_AFTER)
        step = state["tokens_per_chunk"]
        return [min(step, n - i) for i in range(0, n, step)]

    async def sse(body: dict, kind: str):
        total = 0
        for k in chunks(body):
            await asyncio.sleep(TOKEN_SLEEP_S)
            total += k
            text = " tok" * k
            choice = (
                {"index": 0, "delta": {"content": text}}
                if kind == "chat"
                else {"index": 0, "text": text}
            )
            yield f"data: {json.dumps({'choices': [choice]})}\n\n"
        state["inflight"] -= 1  # before the last bytes, so a closed loop can't overlap us
        if state["usage"] and body.get("stream_options", {}).get("include_usage"):
            usage = {"prompt_tokens": 5, "completion_tokens": total, "total_tokens": total + 5}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        return admit(body) or StreamingResponse(sse(body, "chat"), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await request.json()
        return admit(body) or StreamingResponse(sse(body, "text"), media_type="text/event-stream")

    async def ndjson(body: dict):
        next_id = 0
        for k in chunks(body):
            await asyncio.sleep(TOKEN_SLEEP_S)
            ids = list(range(next_id, next_id + k))
            next_id += k
            line = {"text": " tok" * k, "token_ids": ids, "finished": False, "finish_reason": None}
            yield json.dumps(line) + "\n"
        state["inflight"] -= 1
        yield json.dumps({"text": "", "token_ids": [], "finished": True, "finish_reason": "length"})
        yield "\n"

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        return admit(body) or StreamingResponse(ndjson(body), media_type="application/x-ndjson")

    return app


@pytest.fixture(scope="module")
def server():
    state = _fresh_state()
    sock = socket.socket()
    # uvicorn leaves Nagle on for a pre-bound socket: small chunks would then wait ~40 ms for ACKs
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(make_app(state), log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "fake server did not start"
        time.sleep(0.01)
    yield {"url": f"http://127.0.0.1:{sock.getsockname()[1]}", "state": state}
    srv.should_exit = True
    thread.join(timeout=5)


@pytest.fixture
def fake(server):
    server["state"].clear()
    server["state"].update(_fresh_state())
    return server

