"""Host overhead: one workload through mstar.LLM, then through `mstar serve` with a streaming client.

    .venv/bin/python -m benchmark.host_overhead [--model DIR] [--knob NAME=VALUE ...]

Both sides run MSTAR_DTYPE=float32 (the history of docs/engine.rst's tables) unless a knob sets
``dtype`` (``--knob dtype=auto``: the default settings).

Workload (issue 8): one chat prompt; 64 requests with max_tokens drawn U{64..128} from a fixed
seed; ignore_eos with min_tokens = max_tokens (what the streaming client sends); greedy; at most
32 in flight (offline: max_num_seqs=32). c=1 uses the first
--c1-requests of them, one at a time. The offline engine and the server are both up for the whole
run, and every measure is taken --repeats times, interleaved (offline continuous, offline static,
served c=32, then the c=1 pairs; then again). The c=32 figures are each the best of its runs. At
c=1 each request runs offline and then served, so that the two sides of a pair are measured
within a second of each other; c=1's tok/s count every pass. On a VM whose speed drifts by a
third within an hour and by a sixth between two 4-second runs, offline c=1 measured a minute
before served c=1 moved the ratio by up to 0.09 between runs of one build. Prints, from one run:

- the engine's continuous/static ratio: the 64 varied requests vs. waves of equal length (the
  same mean, 96 tokens), both offline, after a warm-up pass;
- served/offline output tok/s at c=32 and c=1;
- where the time goes while serving at c=32: CPU seconds per process and per thread (the main
  thread, the others by name/tid), threads per process, and SSE frames per token seen by the
  client (the last served run); and offline, the CPU by thread of the last continuous run.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmark.runner import run_closed_loop
from benchmark.runner_client import RequestResult, Target, run_client, send_request, session
from benchmark.runner_workload import RequestSpec
from benchmark.serve_matrix import stop, wait_healthy

PROMPT = "Write a short story about a small robot who learns to paint."
NUM_REQUESTS = 64
LEN_LOW, LEN_HIGH, STATIC_LEN = 64, 128, 96
CONCURRENCY = 32
DTYPE = "float32"  # both sides' MSTAR_DTYPE unless --knob dtype=... says otherwise


def output_lens(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(LEN_LOW, LEN_HIGH) for _ in range(n)]


def progress(label: str, tok_s: float) -> float:
    print(f"  {label}: {tok_s:.1f} tok/s", file=sys.stderr, flush=True)
    return tok_s


def offline_tok_s(llm, lens: list[int]) -> float:
    from mstar import SamplingParams

    messages = [[{"role": "user", "content": PROMPT}]] * len(lens)
    # The streaming client's parameters exactly (benchmark.runner_client: ignore_eos comes with
    # min_tokens = max_tokens, so that other servers too emit every token).
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, min_tokens=n)
              for n in lens]
    start = time.perf_counter()
    results = llm.chat(messages, params)
    elapsed = time.perf_counter() - start
    assert [len(r.token_ids) for r in results] == lens
    return sum(lens) / elapsed


def paired_c1(llm, url: str, lens: list[int]) -> list[tuple[int, float, float]]:
    """(tokens, offline seconds, served seconds) of each request at one stream, run offline and
    served one after the other (which goes first alternates): a pair is taken within a second, so
    that the machine's drift falls on both sides alike. On the 2-core VM a request's speed still
    moves by about 6% (one standard deviation) from one second to the next, hence many pairs."""
    pairs = []
    for i, n in enumerate(lens):
        seconds = {}
        for side in ("offline", "served") if i % 2 == 0 else ("served", "offline"):
            if side == "offline":
                start = time.perf_counter()
                offline_tok_s(llm, [n])
                seconds[side] = time.perf_counter() - start
            else:
                seconds[side] = n / run_client(served(url, [n], 1))[0]
        pairs.append((n, seconds["offline"], seconds["served"]))
    return pairs


def c1_summary(pairs: list[tuple[int, float, float]]) -> tuple[float, float, str]:
    """Offline and served tok/s over every pair, and the spread of the pairs' ratios."""
    tokens, offline_s, served_s = (sum(side) for side in zip(*pairs, strict=True))
    ratios = [offline / served for _, offline, served in pairs]
    spread = (f"{len(ratios)} pairs, ratio mean {statistics.fmean(ratios):.3f}, standard error "
              f"{statistics.stdev(ratios) / len(ratios) ** 0.5:.3f}")
    return tokens / offline_s, tokens / served_s, spread


def cpu_seconds_at(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    return cpu_seconds_at(Path(f"/proc/{pid}/stat"))


def process_tree(pid: int) -> dict[int, str]:
    """pid -> role for the API server (pid) and its live descendants."""
    children: dict[int, list[int]] = {}
    cmdlines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    roles = {0: "api_server", 1: "conductor", 2: "worker"}
    tree, todo = {pid: "api_server"}, [(pid, 0)]
    while todo:
        parent, depth = todo.pop()
        for child in children.get(parent, []):
            helper = "resource_tracker" in cmdlines.get(child, "")
            tree[child] = "mp-helper" if helper else roles.get(depth + 1, "?")
            todo.append((child, depth + 1))
    return tree


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds so far of each of a process's threads: "main", the others as name/tid (torch's
    OpenMP threads and Python's are all named "python"; zmq's are "ZMQbg/...")."""
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = "main" if task.name == str(pid) else f"{(task / 'comm').read_text().strip()}/"\
                f"{task.name}"
            totals[name] = cpu_seconds_at(task / "stat")
        except OSError:
            continue
    return totals


def thread_cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    deltas = {name: after[name] - before.get(name, 0.0) for name in after}
    return ", ".join(f"{name} {sec:.1f}" for name, sec in
                     sorted(deltas.items(), key=lambda kv: -kv[1]) if sec >= 0.05)


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


async def served(url: str, lens: list[int], concurrency: int) -> tuple[float, float]:
    """(output tok/s, SSE token frames per output token) of a closed loop at `concurrency`."""
    async with session(600) as client:
        model = (await client.get_json(url + "/v1/models", {}))["data"][0]["id"]  # served name
        target = Target(url, "chat", model, ignore_eos=True, temperature=0.0)
        specs = [RequestSpec(i, PROMPT, n) for i, n in enumerate(lens)]

        async def send(spec: RequestSpec) -> RequestResult:
            return await send_request(client, target, spec)

        start = time.perf_counter()
        results = await run_closed_loop(send, specs, concurrency)
        wall = time.perf_counter() - start
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, first: {errors[0]}")
    tokens = sum(r.output_tokens for r in results)
    frames = sum(len(r.itls) + 1 for r in results)
    return tokens / wall, frames / tokens


def start_server(knobs: list[str], log_path: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in (kv.split("=", 1) for kv in knobs)]
    cmd = [sys.executable, "-m", "mstar", "serve", "--port", str(port), "--device", "cpu",
           f"--max-num-seqs={CONCURRENCY}", *flags]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    log = open(log_path, "w")  # noqa: SIM115 - the server's lifetime; closed by the OS at exit
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 600)
    return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model dir (default: the built-in model)")
    parser.add_argument("--knob", action="append", default=[],
                        help="NAME=VALUE settings knob for both the offline engine and the server")
    parser.add_argument("--c1-requests", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of every measure, interleaved; at c=32 the best of each is "
                        "used, at c=1 every pair counts")
    parser.add_argument("--log", type=Path, default=Path("/tmp/mstar_host_overhead_server.log"))
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from mstar import LLM

    knobs = {"dtype": DTYPE} | dict(kv.split("=", 1) for kv in args.knob)
    lens = output_lens(NUM_REQUESTS)
    c1_lens = lens[: args.c1_requests]
    log_level = "info" if "phase_timing" in knobs else "warning"  # phase timing logs at info
    llm = LLM(model=args.model, device="cpu", max_num_seqs=CONCURRENCY, log_level=log_level,
              **knobs)
    # Warm-up: one full pass first touches the KV cache's pages and the decode mirror's buffers.
    progress("offline warm-up (static)", offline_tok_s(llm, [STATIC_LEN] * NUM_REQUESTS))
    server_args = [f"--model={args.model}"] if args.model else []
    server_knobs = [f"{k}={v}" for k, v in knobs.items()]
    proc, url = start_server(server_knobs + [a.lstrip("-") for a in server_args], args.log)
    continuous = static = served_c32 = 0.0
    c1_pairs: list[tuple[int, float, float]] = []  # (tokens, offline s, served s) a request
    try:
        run_client(served(url, [8, 8], 2))  # warm-up
        tree = process_tree(proc.pid)
        for _ in range(args.repeats):  # interleaved: damps drift on a noisy machine
            threads_before = thread_cpu(os.getpid())
            continuous = max(continuous, progress("offline continuous", offline_tok_s(llm, lens)))
            offline_threads = thread_cpu_delta(threads_before, thread_cpu(os.getpid()))
            static = max(static, progress("offline static",
                                          offline_tok_s(llm, [STATIC_LEN] * NUM_REQUESTS)))
            cpu_before = {pid: cpu_seconds(pid) for pid in tree}
            threads_before = {pid: thread_cpu(pid) for pid in tree}
            client_before = time.process_time()
            tok_s, frames_per_token = run_client(served(url, lens, CONCURRENCY))
            served_c32 = max(served_c32, progress("served c=32", tok_s))
            client_cpu = time.process_time() - client_before
            cpu = {pid: cpu_seconds(pid) - cpu_before[pid] for pid in tree}
            thread_counts = {pid: threads(pid) for pid in tree}
            served_threads = {pid: thread_cpu_delta(threads_before[pid], thread_cpu(pid))
                              for pid in tree}
            c1_pairs += paired_c1(llm, url, c1_lens)
            progress("served c=1 so far (paired)", c1_summary(c1_pairs)[1])
    finally:
        stop(proc)
        llm.engine.shutdown()

    print(f"workload: 1 chat prompt, {NUM_REQUESTS} requests, max_tokens U{{{LEN_LOW}..{LEN_HIGH}}}"
          f" (seed 0), ignore_eos, greedy, fp32, {CONCURRENCY} in flight; c=1: "
          f"{len(c1_lens)} requests; knobs: {knobs or 'defaults'}")
    print(f"{'measure':<34} {'tok/s':>9} {'ratio':>7}")
    print(f"{'offline static waves (96 tok)':<34} {static:>9.1f}")
    print(f"{'offline continuous (64..128 tok)':<34} {continuous:>9.1f} {continuous / static:>7.3f}"
          "  continuous/static")
    print(f"{'served c=32':<34} {served_c32:>9.1f} {served_c32 / continuous:>7.3f}"
          "  served/offline")
    offline_c1, served_c1, spread = c1_summary(c1_pairs)
    print(f"{'offline c=1':<34} {offline_c1:>9.1f}")
    print(f"{'served c=1':<34} {served_c1:>9.1f} {served_c1 / offline_c1:>7.3f}  served/offline"
          f" (every pair's seconds; {spread})")
    print(f"served c=32: SSE token frames per token {frames_per_token:.3f}; "
          f"client CPU {client_cpu:.1f} s")
    for pid, name in tree.items():
        print(f"  {name:<12} pid {pid:<8} CPU {cpu[pid]:6.1f} s  threads {thread_counts[pid]}")
        print(f"    by thread (s): {served_threads[pid]}")
    print(f"offline continuous (last run), CPU by thread (s): {offline_threads}")


if __name__ == "__main__":
    main()
