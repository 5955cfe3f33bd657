"""`mstar serve` with a tensor-parallel replica (gloo on CPU): it answers, and a dead rank takes the
whole group down with a 503 that names the rank, a non-zero exit and no processes left behind.
And two "hosts" on localhost: a conductor and a replica started by `mstar worker` over tcp."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time

import httpx
import pytest
from serve_helpers import (  # noqa: F401 - hard_timeout is an autouse fixture
    Server,
    alive,
    free_port,
    free_port_block,
    hard_timeout,
    start_mstar,
    wait_running,
)

CLUSTER_SECRET = "two-hosts-test-secret"
TP_ENV = {"MSTAR_TENSOR_PARALLEL_SIZE": "2", "MSTAR_TORCH_NUM_THREADS": "1",
          "MSTAR_MAX_NUM_SEQS": "4"}


@pytest.fixture(scope="module")
def tp_server(long_model_dir, tmp_path_factory):
    """On the long-context model (conftest.long_model_dir): a request runs until a rank is killed,
    on a fast machine too."""
    server = Server(long_model_dir, tmp_path_factory.mktemp("tp") / "server.log",
                    {**TP_ENV, "MSTAR_CPU_KV_CACHE_GB": "0.05"})
    try:
        yield server.wait_ready()
    finally:
        server.stop()


def _rank_pids(server: Server) -> dict[int, int]:
    found = re.findall(r"worker_started\s+worker=0 pid=(\d+) rank=(\d+)", server.log())
    return {int(rank): int(pid) for pid, rank in found}


def test_tp2_server_answers_a_chat_request(tp_server):
    assert sorted(_rank_pids(tp_server)) == [0, 1]
    assert re.search(r"workers_ready .*num_workers=1 .*tensor_parallel_size=2", tp_server.log())
    resp = httpx.post(tp_server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "ignore_eos": True})
    assert resp.status_code == 200
    body = resp.json()
    assert body["usage"]["completion_tokens"] == 8
    assert body["choices"][0]["message"]["content"]


def test_killing_one_rank_fails_requests_with_503_naming_it(tp_server):
    pid = _rank_pids(tp_server)[1]
    result: dict = {}

    def complete() -> None:
        resp = httpx.post(tp_server.url + "/v1/completions", timeout=60,
                          json={"prompt": "x", "max_tokens": 16000, "ignore_eos": True})
        result["status"], result["body"] = resp.status_code, resp.json()

    client = threading.Thread(target=complete)
    client.start()
    wait_running(tp_server)
    subprocess.run(["kill", "-9", str(pid)], check=True)
    client.join(30)
    assert result["status"] == 503
    assert f"worker 0 rank 1 (pid {pid}) was killed by SIGKILL" in \
        result["body"]["error"]["message"]
    assert tp_server.wait_exit(30) != 0
    deadline = time.monotonic() + 5
    while [p for p in tp_server.children if alive(p)]:
        assert time.monotonic() < deadline, "processes outlived the server"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def two_hosts(tiny_model_dir, tmp_path_factory):
    """`mstar serve` expecting one remote replica, and `mstar worker` (other env values) joining."""
    root = tmp_path_factory.mktemp("hosts")
    base = free_port_block(4)
    server = Server(tiny_model_dir("llama"), root / "conductor.log", {
        "MSTAR_ZMQ_TRANSPORT": "tcp", "MSTAR_ZMQ_TCP_BASE_PORT": str(base),
        "MSTAR_REMOTE_WORKERS": "1", "MSTAR_TORCH_NUM_THREADS": "1", "MSTAR_MAX_NUM_SEQS": "4",
        "MSTAR_CLUSTER_SECRET": CLUSTER_SECRET})
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env |= {"MSTAR_DEVICE": "cpu", "MSTAR_MAX_NUM_SEQS": "9", "MSTAR_CLUSTER_SECRET": CLUSTER_SECRET}
    log = open(root / "worker.log", "w")  # noqa: SIM115 - closed below
    worker = start_mstar(["worker", "--conductor", f"tcp://127.0.0.1:{base}", "--replica", "0"],
                         env, log)
    try:
        yield server.wait_ready(), worker, root / "worker.log"
    finally:
        server.stop()
        if worker.poll() is None:
            worker.kill()
        log.close()


def test_worker_on_another_host_runs_with_the_conductors_settings(two_hosts):
    server, worker, worker_log = two_hosts
    assert "waiting_for_remote_worker" in server.log()
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "ignore_eos": True})
    assert resp.status_code == 200
    assert resp.json()["usage"]["completion_tokens"] == 6
    differ = [line for line in worker_log.read_text().splitlines()
              if "settings_differ_from_conductor" in line]
    assert differ and "max_num_seqs" in differ[0] and "'conductor': '4'" in differ[0]
    server.stop()
    assert worker.wait(30) == 0  # the conductor's shutdown reached it over tcp
