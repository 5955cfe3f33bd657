"""The benchmark runner against an in-process fake OpenAI-compatible server."""

import asyncio
import json
import re
import socket
import subprocess
import sys

import pytest
from fake_openai_server import EOS_AFTER, REPO, TOKEN_SLEEP_S
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmark.http_stream import MAX_LINE
from benchmark.runner import main
from benchmark.runner_client import RequestResult, Target, send_request, session
from benchmark.runner_metrics import percentile
from benchmark.runner_workload import (
    RequestSpec,
    make_output_lens,
    make_requests,
    poisson_gaps,
)


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
        fake, tmp_path, "--endpoint", endpoint, "--profiling-type", profiling, "--num-requests",
        str(n), "--num-warmup", "2", "--ignore-eos", "--output-len-min", "4",
        "--output-len-max", "8", "--output-len-seed", "1", *extra
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
        fake, tmp_path, "--num-requests", "4", "--max-concurrency", "2", "--output-len-min",
        "6", "--output-len-max", "6"
    )
    assert rc == 0
    assert report["metrics"]["total_output_tokens"] == 4 * EOS_AFTER
    assert "min_tokens" not in fake["state"]["bodies"][0]


def test_online_uncapped_sends_everything_at_once(fake, tmp_path):
    rc, report = run(
        fake, tmp_path, "--profiling-type", "online", "--num-requests", "8", "--ignore-eos",
        "--output-len-min", "8", "--output-len-max", "8"
    )
    assert rc == 0 and report["metrics"]["completed"] == 8
    assert report["config"]["rate"] is None  # strict JSON: no Infinity literal
    assert fake["state"]["max_inflight"] == 8


@pytest.mark.parametrize("usage, expected", [(True, 4 * 6), (False, 4 * 3)])
def test_token_count_prefers_usage_over_chunks(fake, tmp_path, usage, expected):
    fake["state"].update(tokens_per_chunk=2, usage=usage)
    rc, report = run(
        fake, tmp_path, "--num-requests", "4", "--max-concurrency", "4", "--ignore-eos",
        "--output-len-min", "6", "--output-len-max", "6"
    )
    assert rc == 0
    assert report["metrics"]["total_output_tokens"] == expected


def test_server_errors_are_counted_and_reported(fake, tmp_path, capsys):
    fake["state"]["fail_every"] = 3
    rc, report = run(
        fake, tmp_path, "--num-requests", "9", "--max-concurrency", "2", "--ignore-eos",
        "--output-len-min", "4", "--output-len-max", "4"
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
    assert "ConnectionRefusedError" in report["metrics"]["first_error"]


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
        fake, tmp_path, "--num-requests", "1", "--max-concurrency", "1", "--model", "m",
        "--api-key", "sk-secret"
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


def _sse_body(n: int) -> bytes:
    """n token events (multi-byte text), then the usage event and [DONE]."""
    events = [{"choices": [{"index": 0, "delta": {"content": f"tök{i} "}}]} for i in range(n)]
    events.append({"choices": [], "usage": {"completion_tokens": n}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + \
        b"data: [DONE]\n\n"


async def _send_in_pieces(body: bytes, cuts: list[int], output_len: int) -> RequestResult:
    """send_request against a server that writes ``body`` in pieces cut at ``cuts``, each
    flushed a moment apart (so that the client reads them apart)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", head)
        await reader.readexactly(int(length[1]) if length else 0)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"connection: close\r\n\r\n")
        for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
            writer.write(body[start:end])
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with session(10) as client:
            target = Target(f"http://127.0.0.1:{port}", "chat", "m", False, 0.0)
            return await send_request(client, target, RequestSpec(0, "hi", output_len))
    finally:
        server.close()


@settings(max_examples=25, deadline=None)
@given(data=st.data(), n=st.integers(1, 6))
def test_events_are_read_whole_however_the_stream_is_cut(data, n):
    body = _sse_body(n)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=12)))
    result = asyncio.run(_send_in_pieces(body, cuts, n))
    assert result.error is None
    assert result.output_tokens == n and len(result.itls) == n - 1


def test_a_line_over_the_limit_is_an_error_not_a_hang():
    body = b"data: " + b"x" * (MAX_LINE + 1)
    result = asyncio.run(_send_in_pieces(body, list(range(1 << 20, len(body), 1 << 20)), 4))
    assert result.error is not None and "ValueError" in result.error


async def _stall_after(head: bytes, timeout_s: float) -> RequestResult:
    """send_request against a server that writes ``head`` and then neither writes nor closes."""
    release = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head)
        await writer.drain()
        await release.wait()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with session(timeout_s) as client:
            target = Target(f"http://127.0.0.1:{port}", "chat", "m", False, 0.0)
            return await send_request(client, target, RequestSpec(0, "hi", 4))
    finally:
        release.set()
        server.close()


def test_a_stream_that_stalls_times_out_between_reads():
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n")
    event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
    result = asyncio.run(_stall_after(head + b"%x\r\n" % len(event) + event + b"\r\n", 0.5))
    assert result.error is not None and "TimeoutError" in result.error
    assert 0.5 <= result.e2e < 5


def test_a_chunked_stream_cut_short_is_an_error():
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"%x\r\n" % len(event) + event + b"\r\n")
        await writer.drain()
        writer.close()  # no last chunk: the response never ended

    async def go() -> RequestResult:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with session(10) as client:
                target = Target(f"http://127.0.0.1:{port}", "chat", "m", False, 0.0)
                return await send_request(client, target, RequestSpec(0, "hi", 4))
        finally:
            server.close()

    result = asyncio.run(go())
    assert result.error is not None and "ConnectionError" in result.error
