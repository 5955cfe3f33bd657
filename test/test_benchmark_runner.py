"""The benchmark runner against an in-process fake OpenAI-compatible server."""

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from benchmark.runner import main
from benchmark.runner_metrics import percentile
from benchmark.runner_workload import make_output_lens, make_requests, poisson_gaps

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


def run(fake, tmp_path, *extra: str) -> tuple[int, dict | None]:
    argv = ["--url", fake["url"], "--output-dir", str(tmp_path), *extra]
    rc = main(argv)
    out = tmp_path / "results.json"
    return rc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("endpoint", ["chat", "completions", "generate"])
@pytest.mark.parametrize("profiling", ["closed_loop", "online"])
def test_runs_every_endpoint_and_profile(fake, tmp_path, capsys, endpoint, profiling):
    n, cap = 12, 3
    extra = ["--max-concurrency", str(cap)]
    if profiling == "online":
        extra += ["--rate", "60"]
    rc, report = run(
        fake,
        tmp_path,
        "--endpoint",
        endpoint,
        "--profiling-type",
        profiling,
        "--num-requests",
        str(n),
        "--num-warmup",
        "2",
        "--ignore-eos",
        "--output-len-min",
        "4",
        "--output-len-max",
        "8",
        "--output-len-seed",
        "1",
        *extra,
    )
    assert rc == 0
    m = report["metrics"]
    assert (m["completed"], m["errors"]) == (n, 0)
    assert m["total_output_tokens"] == sum(make_output_lens(n, 4, 8, 1))
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_latency_ms"):
        assert all(v > 0 for v in m[key].values()), key
    assert m["ttft_ms"]["p50"] < m["e2e_latency_ms"]["p50"]
    # chunks are timed as they arrive, not after buffering: gaps reflect the server's pacing
    assert m["itl_ms"]["p50"] >= TOKEN_SLEEP_S * 1000 * 0.5
    assert m["request_throughput"] > 0 and m["output_throughput"] > m["request_throughput"]
    assert len(report["requests"]) == n and report["config"]["model"] == "fake-model"
    state = fake["state"]
    assert state["count"] == n + 2  # warm-up requests were sent too
    if profiling == "closed_loop":
        assert state["max_inflight"] == cap
    else:
        assert state["max_inflight"] <= cap
        assert m["wall_time_s"] >= sum(poisson_gaps(n, 60, 0)[:-1])
    body = state["bodies"][-1]
    assert body["stream"] is True
    if endpoint == "generate":
        assert set(body) == {"prompt", "max_tokens", "ignore_eos", "temperature", "stream"}
    else:
        assert body["model"] == "fake-model"
        assert body["min_tokens"] == body["max_tokens"] and body["ignore_eos"] is True
        assert body["stream_options"] == {"include_usage": True}
    out = capsys.readouterr().out
    for label in ("Completed requests", "TTFT", "ITL", "E2E latency", "Output throughput"):
        assert label in out


def test_without_ignore_eos_counts_what_the_server_streamed(fake, tmp_path):
    rc, report = run(
        fake,
        tmp_path,
        "--num-requests",
        "4",
        "--max-concurrency",
        "2",
        "--output-len-min",
        "6",
        "--output-len-max",
        "6",
    )
    assert rc == 0
    assert report["metrics"]["total_output_tokens"] == 4 * EOS_AFTER
    assert "min_tokens" not in fake["state"]["bodies"][0]


def test_online_uncapped_sends_everything_at_once(fake, tmp_path):
    rc, report = run(
        fake,
        tmp_path,
        "--profiling-type",
        "online",
        "--num-requests",
        "8",
        "--ignore-eos",
        "--output-len-min",
        "8",
        "--output-len-max",
        "8",
    )
    assert rc == 0 and report["metrics"]["completed"] == 8
    assert report["config"]["rate"] is None  # strict JSON: no Infinity literal
    assert fake["state"]["max_inflight"] == 8


@pytest.mark.parametrize("usage, expected", [(True, 4 * 6), (False, 4 * 3)])
def test_token_count_prefers_usage_over_chunks(fake, tmp_path, usage, expected):
    fake["state"].update(tokens_per_chunk=2, usage=usage)
    rc, report = run(
        fake,
        tmp_path,
        "--num-requests",
        "4",
        "--max-concurrency",
        "4",
        "--ignore-eos",
        "--output-len-min",
        "6",
        "--output-len-max",
        "6",
    )
    assert rc == 0
    assert report["metrics"]["total_output_tokens"] == expected


def test_server_errors_are_counted_and_reported(fake, tmp_path, capsys):
    fake["state"]["fail_every"] = 3
    rc, report = run(
        fake,
        tmp_path,
        "--num-requests",
        "9",
        "--max-concurrency",
        "2",
        "--ignore-eos",
        "--output-len-min",
        "4",
        "--output-len-max",
        "4",
    )
    assert rc == 0
    m = report["metrics"]
    assert (m["completed"], m["errors"]) == (6, 3)
    assert m["total_output_tokens"] == 6 * 4
    assert "HTTP 500" in m["first_error"] and "injected failure" in m["first_error"]
    assert sum(r["error"] is not None for r in report["requests"]) == 3
    assert "First error: HTTP 500" in capsys.readouterr().out


def test_unreachable_server_fails_every_request(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = main(
        [
            "--url",
            f"http://127.0.0.1:{port}",
            "--endpoint",
            "generate",
            "--num-requests",
            "3",
            "--max-concurrency",
            "1",
            "--output-dir",
            str(tmp_path),
        ]
    )
    report = json.loads((tmp_path / "results.json").read_text())
    assert rc == 1
    assert report["metrics"]["errors"] == 3 and report["config"]["model"] == "default"
    assert "ConnectError" in report["metrics"]["first_error"]


def test_model_listing_fallback(fake, tmp_path, capsys):
    fake["state"]["models"] = False
    rc, report = run(
        fake, tmp_path, "--endpoint", "generate", "--num-requests", "2", "--max-concurrency", "1"
    )
    assert rc == 0 and report["config"]["model"] == "default"
    rc, _ = run(fake, tmp_path / "chat", "--num-requests", "2", "--max-concurrency", "1")
    assert rc == 2
    assert "pass --model" in capsys.readouterr().err


def test_api_key_is_sent_but_not_written(fake, tmp_path):
    rc, report = run(
        fake,
        tmp_path,
        "--num-requests",
        "1",
        "--max-concurrency",
        "1",
        "--model",
        "m",
        "--api-key",
        "sk-secret",
    )
    assert rc == 0
    assert "sk-secret" not in (tmp_path / "results.json").read_text()
    assert fake["state"]["bodies"][0]["model"] == "m"


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "--max-concurrency is required"),
        (
            ["--max-concurrency", "1", "--output-len-min", "9", "--output-len-max", "3"],
            "--output-len-max must be >= --output-len-min",
        ),
        (["--max-concurrency", "0"], "--max-concurrency must be >= 1"),
        (["--profiling-type", "online", "--rate", "0"], "--rate must be > 0"),
    ],
)
def test_invalid_flags_name_the_parameter(tmp_path, capsys, bad, message):
    assert main(["--output-dir", str(tmp_path), *bad]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_workload_is_deterministic_and_distinct():
    a = make_requests(50, 32, 4, 9, prompt_seed=7, out_seed=3)
    assert a == make_requests(50, 32, 4, 9, prompt_seed=7, out_seed=3)
    assert len({r.prompt for r in a}) == 50
    assert all(4 <= r.output_len <= 9 for r in a) and len({r.output_len for r in a}) > 1
    assert all(28 <= len(r.prompt.split()) <= 36 for r in a)
    assert a != make_requests(50, 32, 4, 9, prompt_seed=8, out_seed=3)
    gaps = poisson_gaps(4000, 20.0, seed=1)
    assert gaps == poisson_gaps(4000, 20.0, seed=1)
    assert abs(sum(gaps) / len(gaps) - 1 / 20) < 0.005


def test_percentile_interpolates():
    assert percentile([0.0, 10.0], 50) == 5.0
    values = [float(v) for v in range(1, 102)]
    assert (percentile(values, 50), percentile(values, 99)) == (51.0, 100.0)


def test_module_entry_point_prints_table(fake, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark.runner",
            "--url",
            fake["url"],
            "--endpoint",
            "completions",
            "--num-requests",
            "3",
            "--max-concurrency",
            "2",
            "--ignore-eos",
            "--output-len-min",
            "2",
            "--output-len-max",
            "2",
            "--output-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Completed requests" in proc.stdout and "TTFT" in proc.stdout
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["completed"] == 3
