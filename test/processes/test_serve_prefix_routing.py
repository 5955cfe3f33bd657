"""`mstar serve` with two replicas routes by cached prefix: a long shared system prompt stays on the
replica that first computed it while a long request with the same prefix keeps that replica busier
(least-loaded routing would send the prompt to the idle replica, which has to compute it again; how
many requests see that depends on how long the long one lasts, but none may leave replica 0);
each request after the first reports its cached tokens, and /metrics counts the decisions and the
hits per replica."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from serve_helpers import Server, hard_timeout, running_server  # noqa: F401

SYSTEM = " ".join(f"Rule {n}: answer briefly and politely." for n in range(5))
REPEATS = 6
BLOCK = 16  # MSTAR_KV_BLOCK_SIZE (its default)
LONG_TOKENS = 300  # the busy request's output: the tiny model's context is 512


@pytest.fixture(scope="module")
def two_replicas(tiny_model_dir, tmp_path_factory):
    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("route") / "log", {
        "MSTAR_NUM_WORKERS": "2", "MSTAR_TORCH_NUM_THREADS": "1", "MSTAR_MAX_NUM_SEQS": "4",
        "MSTAR_ROUTE_MAX_IMBALANCE": "4"})


def _body(question: str, max_tokens: int) -> dict:
    return {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": question}], "max_tokens": max_tokens}


def _ask(server: Server, question: str) -> dict:
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=60, json=_body(question, 2))
    assert resp.status_code == 200, resp.text
    return resp.json()["usage"]


def _long(server: Server, usage: list[dict], started: threading.Event) -> None:
    """A long stream with the shared system prompt, read to its end (``started`` set at its first
    token); its usage into ``usage``."""
    body = {**_body("Tell a long story.", LONG_TOKENS), "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", server.url + "/v1/chat/completions", timeout=120, json=body) as resp:
        for line in resp.iter_lines():
            started.set()
            if line.startswith("data: {"):
                usage.append(json.loads(line.removeprefix("data: ")).get("usage"))


def _gauge(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(float(value) for labelled, value in re.findall(rf"^{name}\{{(.*)\}} (\S+)$", text, re.M)
               if all(f'{k}="{v}"' in labelled for k, v in labels.items()))


def test_a_shared_system_prompt_stays_on_the_replica_that_cached_it(two_replicas):
    server = two_replicas
    first = _ask(server, "Question zero?")  # both replicas idle: replica 0 takes it
    assert first["prompt_tokens"] > 6 * BLOCK
    assert first["prompt_tokens"] + LONG_TOKENS < 500
    streamed: list[dict] = []
    started = threading.Event()
    busy = threading.Thread(target=_long, args=(server, streamed, started))
    busy.start()  # its prefix takes it to replica 0 too, which then has one more live request
    try:
        assert started.wait(60)
        usages = [_ask(server, f"Question {n}?") for n in range(1, REPEATS)]
    finally:
        busy.join(120)
    long_usage = streamed[-1]
    assert long_usage["completion_tokens"] == LONG_TOKENS
    for usage in [*usages, long_usage]:  # all but the user's turn came from replica 0's cache
        assert usage["prompt_tokens_details"]["cached_tokens"] >= first["prompt_tokens"] - 2 * BLOCK
    metrics = server.metrics_text()
    assert _gauge(metrics, "mstar_route_decisions", replica="0", rule="prefix") == REPEATS
    assert _gauge(metrics, "mstar_route_decisions", replica="1") == 0
    assert _gauge(metrics, "mstar_route_prefix_hits", replica="0") == REPEATS
    assert _gauge(metrics, "mstar_route_cached_tokens", replica="0") == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in [*usages, long_usage])
