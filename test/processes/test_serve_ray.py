"""MSTAR_DISTRIBUTED_EXECUTOR=ray: `mstar serve` with two replicas as Ray actors on a local Ray
cluster of two nodes (``ray.cluster_utils.Cluster``: two raylets on this host, one CPU each, so
that each replica's placement group lands on its own node). Removing the worker node mid-stream
fails its replica's request with a 503 naming the actor, the other replica serves on, and no
process is left behind. Without Ray installed, the cluster test skips (naming the package) and
the preflight test checks the refusal."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from serve_helpers import Server, alive, free_port, free_port_block

RAY_MISSING = importlib.util.find_spec("ray") is None
needs_ray = pytest.mark.skipif(RAY_MISSING, reason="ray is not installed: pip install 'mstar[ray]'")
# On the long-context model (conftest.long_model_dir): the lost node's stream is still running
# when its node goes, on a fast machine too (the tiny models' ~500 tokens can end first).
LONG = {"prompt": "x", "max_tokens": 3000, "ignore_eos": True, "stream": True}
# Ray's node failure detection, made quick: the removed node is found dead within ~1 s.
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 250,
                      "health_check_failure_threshold": 4}


@pytest.fixture(scope="module")
def ray_serve(long_model_dir, tmp_path_factory):
    """(server, the worker node): the head node and one worker node, one replica on each."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "_system_config": FAST_HEALTH_CHECKS})
    try:
        node = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        server = Server(long_model_dir, tmp_path_factory.mktemp("ray") / "server.log", {
            "MSTAR_CPU_KV_CACHE_GB": "0.05",
            "MSTAR_DISTRIBUTED_EXECUTOR": "ray", "MSTAR_RAY_ADDRESS": cluster.address,
            "MSTAR_ZMQ_TRANSPORT": "tcp", "MSTAR_ZMQ_TCP_BASE_PORT": str(free_port_block(4)),
            "MSTAR_NUM_WORKERS": "2", "MSTAR_TORCH_NUM_THREADS": "1", "MSTAR_MAX_NUM_SEQS": "4",
            "MSTAR_REQUEST_TIMEOUT_S": "60"})
        try:
            yield server.wait_ready(), cluster, node
        finally:
            server.stop()
    finally:
        cluster.shutdown()


def _started(log: str) -> dict[int, tuple[int, str]]:
    """worker index -> (its actor's pid, its Ray node id), from the conductor's log."""
    found = {}
    for line in log.splitlines():
        if "worker_started" in line:
            fields = dict(re.findall(r"(\w+)=(\S+)", line))
            found[int(fields["worker"])] = (int(fields["pid"]), fields["ray_node"])
    return found


def _events(lines, until: float = float("inf")) -> list[dict]:
    """A stream's events from here: to its end, or up to the first read after ``until``
    (``time.monotonic()``)."""
    events = []
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line.removeprefix("data: ")))
            if time.monotonic() > until:
                break
    return events


@needs_ray
def test_a_lost_node_fails_its_replica_and_the_other_serves_on(ray_serve):
    server, cluster, node = ray_serve
    started = _started(server.log())
    assert {n for _, n in started.values()} == {node.node_id, cluster.head_node.node_id}
    lost = next(i for i, (_, n) in started.items() if n == node.node_id)
    url = server.url + "/v1/completions"
    with httpx.stream("POST", url, json=LONG, timeout=60) as first, \
            httpx.stream("POST", url, json=LONG, timeout=60) as second:
        # equal load: the first request goes to replica 0, the second to replica 1; each is
        # running once its first token came
        streams = [first.iter_lines(), second.iter_lines()]
        assert all(next(s).startswith("data: ") for s in streams)
        # the node goes away: its processes die at once (a raylet's workers would notice its
        # death only later, and the lost replica could finish its stream over ZeroMQ meanwhile)
        os.kill(started[lost][0], signal.SIGKILL)
        cluster.remove_node(node, allow_graceful=False)
        failed = _events(streams[lost])[-1]
        # the other serves on: read past what it had sent when the loss was answered (a wrong
        # 503 would have been sent with it), then leave (an abort): all 3000 tokens could
        # outlast the request timeout on a busy machine
        served = _events(streams[1 - lost], until=time.monotonic() + 1)
    assert failed["error"]["type"] == "service_unavailable", failed
    assert f"worker {lost} (pid {started[lost][0]}, ray actor" in failed["error"]["message"]
    assert served and not [event for event in served if "error" in event], served[-3:]
    health = httpx.get(server.url + "/health", timeout=5).json()
    assert health["status"] == "degraded" and f"worker {lost}" in health["message"]
    for _ in range(4):  # none is placed on the lost replica (it would never answer)
        done = httpx.post(url, timeout=30, json={"prompt": "hi", "max_tokens": 8})
        assert done.status_code == 200, done.text
    server.stop()
    assert server.proc.returncode == 0, server.log()
    assert "conductor_killed" not in server.log()  # it stopped its actors and left in time
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid, _ in started.values()):  # both actors' processes end
        assert time.monotonic() < deadline, f"left behind: {started}"
        time.sleep(0.2)


def test_without_ray_the_executor_fails_preflight(tiny_model_dir):
    """Ray hidden (``sys.modules['ray'] = None`` makes it unimportable): `mstar serve` refuses
    before it starts anything, and `mstar config validate` names the knob."""
    hide = ("import sys; sys.modules['ray'] = None; from mstar.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")},
           "MSTAR_DISTRIBUTED_EXECUTOR": "ray", "MSTAR_ZMQ_TRANSPORT": "tcp",
           "MSTAR_DEVICE": "cpu", "MSTAR_PORT": str(free_port())}
    serve = subprocess.run([sys.executable, "-c", hide, "serve", str(tiny_model_dir("llama"))],
                           capture_output=True, text=True, env=env, timeout=120)
    assert serve.returncode == 1
    assert "preflight_failed" in serve.stdout + serve.stderr
    assert "pip install 'mstar[ray]'" in serve.stdout + serve.stderr
    validate = subprocess.run([sys.executable, "-c", hide, "config", "validate"],
                              capture_output=True, text=True, env=env, timeout=60)
    assert validate.returncode == 1
    assert "MSTAR_DISTRIBUTED_EXECUTOR" in validate.stdout and "not installed" in validate.stdout
