"""A short chat's latency beside a long embedding request (issue 33): idle, beside an N-token
/v1/embeddings request, and the embedding's own time.

    .venv/bin/python -m benchmark.embed_latency [--url URL | --model MODEL] [--tokens 7140]
        [--runs 3] [--max-tokens 24] [--serve-env MSTAR_X=V ...]

Without ``--url`` it starts ``mstar serve MODEL`` (the built-in model by default) on a free port
and stops it at the end. Each run: the chat alone, then the embedding with the chat sent
``--delay`` seconds after it (so the embedding's context is already long). Prints a table of the
medians (and every run) in seconds. ``MSTAR_PREFILL_SHARE_BESIDE_DECODES`` (``--serve-env``)
sets how much of a decode step's time the long prompt may take beside it; 0 is the behaviour
before it existed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from benchmark.serve_matrix import stop, wait_healthy


def chat_s(url: str, max_tokens: int) -> float:
    body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}
    start = time.perf_counter()
    httpx.post(url + "/v1/chat/completions", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - start


def embed_s(url: str, tokens: int, run: int) -> float:
    """One embedding of ``tokens`` token ids (small ones: any vocabulary has them), different
    for each ``run`` so that no prefix is cached."""
    ids = [5 + (i * 7 + run) % 300 for i in range(tokens)]
    start = time.perf_counter()
    response = httpx.post(url + "/v1/embeddings", json={"input": [ids]}, timeout=3600)
    if response.status_code != 200:  # a server's request timeout, say: still a time to report
        print(f"embedding answered {response.status_code}: {response.text[:200]}")
    return time.perf_counter() - start


def beside(url: str, tokens: int, max_tokens: int, delay: float,
           run: int) -> tuple[float, float]:
    """(the chat's seconds, the embedding's), the chat sent ``delay`` s after the embedding."""
    with ThreadPoolExecutor(1) as pool:
        embedding = pool.submit(embed_s, url, tokens, run)
        time.sleep(delay)
        chat = chat_s(url, max_tokens)
        return chat, embedding.result()


def measure(url: str, args: argparse.Namespace) -> dict[str, list[float]]:
    chat_s(url, args.max_tokens)  # warm-up
    rows: dict[str, list[float]] = {"chat idle": [], "chat beside embedding": [], "embedding": []}
    for run in range(args.runs):
        rows["chat idle"].append(chat_s(url, args.max_tokens))
        chat, embedding = beside(url, args.tokens, args.max_tokens, args.delay, run)
        rows["chat beside embedding"].append(chat)
        rows["embedding"].append(embedding)
    return rows


def serve(model: str, env_pairs: list[str]) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env.update(pair.split("=", 1) for pair in env_pairs)
    command = [sys.executable, "-m", "mstar", "serve", model, "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, 600)
    return url, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (else one is started)")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--tokens", type=int, default=7140, help="embedding input tokens")
    parser.add_argument("--max-tokens", type=int, default=24, help="the chat's output tokens")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay", type=float, default=2.0,
                        help="seconds between sending the embedding and the chat")
    parser.add_argument("--serve-env", nargs="*", default=[], metavar="MSTAR_X=V")
    args = parser.parse_args()
    url, proc = (args.url, None) if args.url else serve(args.model, args.serve_env)
    try:
        rows = measure(url, args)
    finally:
        if proc is not None:
            stop(proc)
    print(f"{'':24s} {'median s':>9s}  runs")
    for name, times in rows.items():
        runs = " ".join(f"{t:.2f}" for t in times)
        print(f"{name:24s} {statistics.median(times):9.2f}  {runs}")


if __name__ == "__main__":
    main()
