"""Prefix-cache-aware routing across replicas (issue 38, docs/distributed.rst): the prefix-cache hit
rate and the throughput of 2 replicas routed by prefix, against 1 replica's hit rate and against 2
replicas routed by load alone, in one run.

    PYTHONPATH=CHECKOUT .venv/bin/python -m benchmark.prefix_routing [--model MODEL]
        [--prompts 8] [--requests 64] [--system-words 700] [--max-tokens 32] [--concurrency 16]
        [--serve-env MSTAR_X=V ...]

Each configuration gets a fresh server (cold caches): ``mstar serve MODEL`` with
MSTAR_NUM_WORKERS=1, then 2 with MSTAR_ROUTE_POLICY=least_loaded, then 2 with prefix. The workload
is the same for each: ``--prompts`` distinct long system prompts, shared by ``--requests`` chats
(each with its own question), in one shuffled order (seed 0), ``--concurrency`` in flight. The hit
rate is the cached prompt tokens (usage.prompt_tokens_details.cached_tokens) over all prompt
tokens. The bars (issue 38): prefix's hit rate at least 0.85 of one replica's, its throughput at
least 1.0x least-loaded's.
"""

from __future__ import annotations

import argparse
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from benchmark.embed_latency import serve
from benchmark.serve_matrix import stop

CONFIGS = {"1 replica": ["MSTAR_NUM_WORKERS=1"],
           "2, least_loaded": ["MSTAR_NUM_WORKERS=2", "MSTAR_ROUTE_POLICY=least_loaded"],
           "2, prefix": ["MSTAR_NUM_WORKERS=2", "MSTAR_ROUTE_POLICY=prefix"]}
HIT_RATE_BAR, THROUGHPUT_BAR = 0.85, 1.0


@dataclass
class Result:
    hit_rate: float
    requests_s: float
    tokens_s: float


def workload(prompts: int, requests: int, words: int) -> list[list[dict]]:
    """The chats' messages: system prompt ``i % prompts`` for request i, shuffled (seed 0)."""
    systems = [f"You are assistant number {k}. " + " ".join(
        f"Policy {k}.{n}: stay on topic, cite sources, be brief." for n in range(words // 8))
        for k in range(prompts)]
    chats = [[{"role": "system", "content": systems[i % prompts]},
              {"role": "user", "content": f"Question {i}: what is {i} times {i + 3}?"}]
             for i in range(requests)]
    random.Random(0).shuffle(chats)
    return chats


def chat(url: str, messages: list[dict], max_tokens: int) -> dict:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    response = httpx.post(url + "/v1/chat/completions", json=body, timeout=3600)
    response.raise_for_status()
    return response.json()["usage"]


def measure(url: str, chats: list[list[dict]], args: argparse.Namespace) -> Result:
    chat(url, [{"role": "user", "content": "Warm up."}], 2)
    start = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        usages = list(pool.map(lambda messages: chat(url, messages, args.max_tokens), chats))
    seconds = time.perf_counter() - start
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    prompt = sum(u["prompt_tokens"] for u in usages)
    output = sum(u["completion_tokens"] for u in usages)
    return Result(cached / prompt, len(usages) / seconds, output / seconds)


def run(args: argparse.Namespace) -> dict[str, Result]:
    chats = workload(args.prompts, args.requests, args.system_words)
    results = {}
    for name, env in CONFIGS.items():
        url, proc = serve(args.model, env + args.serve_env)
        try:
            results[name] = measure(url, chats, args)
        finally:
            stop(proc)
    return results


def report(results: dict[str, Result]) -> None:
    one, balanced, prefix = (results[name] for name in CONFIGS)
    print(f"{'configuration':16s} {'hit rate':>9s} {'req/s':>8s} {'tok/s':>8s}")
    for name, r in results.items():
        print(f"{name:16s} {r.hit_rate:9.3f} {r.requests_s:8.2f} {r.tokens_s:8.1f}")
    hits = prefix.hit_rate / one.hit_rate if one.hit_rate else float("nan")
    speed = prefix.requests_s / balanced.requests_s
    print(f"prefix hit rate / 1 replica's: {hits:.2f} (bar: {HIT_RATE_BAR:.2f})")
    print(f"prefix throughput / least_loaded's: {speed:.2f}x (bar: {THROUGHPUT_BAR:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--prompts", type=int, default=8, help="distinct system prompts")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--system-words", type=int, default=700,
                        help="about how many words each system prompt has")
    parser.add_argument("--max-tokens", type=int, default=32, help="output tokens per request")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--serve-env", nargs="*", default=[], metavar="MSTAR_X=V")
    report(run(parser.parse_args()))


if __name__ == "__main__":
    main()
