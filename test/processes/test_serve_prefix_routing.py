"""`mstar serve` with two replicas routes by cached prefix: a long shared system prompt, sent again
and again while another request keeps its replica busier, stays on the replica that cached it
(least-loaded routing would send it to the idle one, which has to compute it again), each request
after the first reports its cached tokens, and /metrics counts the decisions and hits."""

from __future__ import annotations

import re
import threading

import httpx
import pytest
from serve_helpers import Server, hard_timeout, running_server, wait_running  # noqa: F401

SYSTEM = " ".join(f"Rule {n}: answer briefly and politely." for n in range(24))
REPEATS = 6
BLOCK = 16  # MSTAR_KV_BLOCK_SIZE (its default)


@pytest.fixture(scope="module")
def two_replicas(tiny_model_dir, tmp_path_factory):
    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("route") / "log", {
        "MSTAR_NUM_WORKERS": "2", "MSTAR_TORCH_NUM_THREADS": "1", "MSTAR_MAX_NUM_SEQS": "4",
        "MSTAR_ROUTE_MAX_IMBALANCE": "4"})


def _ask(server: Server, question: str) -> dict:
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "max_tokens": 2})
    assert resp.status_code == 200, resp.text
    return resp.json()["usage"]


def _occupy(server: Server, done: threading.Event) -> None:
    """A long stream, held open until ``done``: its replica has one more live request."""
    with httpx.stream("POST", server.url + "/v1/completions", timeout=60, json={
            "prompt": "x", "max_tokens": 480, "ignore_eos": True, "stream": True}) as resp:
        for _ in resp.iter_lines():
            if done.is_set():
                return


def _gauge(text: str, name: str, **labels: str) -> float:
    found = [float(value) for labelled, value in re.findall(rf"^{name}\{{(.*)\}} (\S+)$", text,
                                                             re.M)
             if all(f'{k}="{v}"' in labelled for k, v in labels.items())]
    return sum(found)


def test_a_shared_system_prompt_stays_on_the_replica_that_cached_it(two_replicas):
    server = two_replicas
    first = _ask(server, "Question zero?")  # both replicas idle: replica 0 takes it
    assert first["prompt_tokens"] > 8 * BLOCK
    done = threading.Event()
    busy = threading.Thread(target=_occupy, args=(server, done))
    busy.start()
    try:
        wait_running(server)  # replica 0 (the lowest index of two idle ones) runs the stream
        usages = [_ask(server, f"Question {n}?") for n in range(1, REPEATS)]
    finally:
        done.set()
        busy.join(60)
    for usage in usages:  # all but the user's turn came from replica 0's prefix cache
        assert usage["prompt_tokens_details"]["cached_tokens"] >= first["prompt_tokens"] - 2 * BLOCK
    metrics = server.metrics_text()
    assert _gauge(metrics, "mstar_route_decisions", replica="0", rule="prefix") == REPEATS - 1
    assert _gauge(metrics, "mstar_route_decisions", replica="1") == 0
    assert _gauge(metrics, "mstar_route_prefix_hits", replica="0") == REPEATS - 1
    assert _gauge(metrics, "mstar_route_cached_tokens", replica="0") == sum(
        u["prompt_tokens_details"]["cached_tokens"] for u in usages)
