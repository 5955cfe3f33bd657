"""A served model over tcp, probed on every tcp port (the API server's inbox, the conductor, the
local worker and the worker that joined from "another host"): garbage bytes, a truncated frame, a
100 MB frame, a wrong-type message, a forged JOIN and a forged reload (and fatal), from peers with
and without the cluster secret; from a peer with the secret, a reload with an unknown knob, a
request past the vocabulary, reports outside the replica table, and random well-formed messages of
every type (checked at each inbox, ``mstar.ipc.inbox_checks``). After each one a chat request
succeeds within 2 s with the same settings fingerprint; impostor workers without the secret never
join; no log holds the API key. One server (two replicas, one of them remote) for every probe."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time

import httpx
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_helpers import Server, free_port_block, hard_timeout, start_mstar  # noqa: F401 (autouse)
from wire_strategies import messages

from mstar.ipc import messages as m
from mstar.ipc.security import CurveKeys, SocketSecurity
from mstar.ipc.sockets import push_socket
from mstar.settings import WorkerSettings
from mstar.settings.reload import reloadable_values

SECRET = "transport-test-cluster-secret"
API_KEY = "sk-transport-test-key-4711"
HUGE = 100_000_000
LINGER_MS = 2000
STRANGER_LINGER_MS = 300
SEND_TIMEOUT_MS = 1000


def _worker(root, name: str, conductor: str, env: dict[str, str]) -> tuple[subprocess.Popen, object]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    log = open(root / f"{name}.log", "w")  # noqa: SIM115 - closed by the fixture
    proc = start_mstar(["worker", "--conductor", conductor, "--replica", "1"],
                       {**base, "MSTAR_DEVICE": "cpu", "MSTAR_TORCH_NUM_THREADS": "1", **env}, log)
    return proc, log


@pytest.fixture(scope="module")
def cluster(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("transport")
    base = free_port_block(4)
    conductor = f"tcp://127.0.0.1:{base}"
    server = Server(tiny_model_dir("llama"), root / "server.log", {
        "MSTAR_ZMQ_TRANSPORT": "tcp", "MSTAR_ZMQ_TCP_BASE_PORT": str(base),
        "MSTAR_NUM_WORKERS": "2", "MSTAR_REMOTE_WORKERS": "1", "MSTAR_CLUSTER_SECRET": SECRET,
        "MSTAR_API_KEY": API_KEY, "MSTAR_TORCH_NUM_THREADS": "1", "MSTAR_MAX_NUM_SEQS": "4"})
    impostors = [_worker(root, "no-secret", conductor, {}),
                 _worker(root, "wrong-secret", conductor, {"MSTAR_CLUSTER_SECRET": "a-guess",
                                                          "MSTAR_STARTUP_TIMEOUT_S": "3"})]
    workers = impostors
    try:
        for proc, _ in impostors:
            assert proc.wait(60) == 1
        assert "settings_differ" not in (root / "wrong-secret.log").read_text()
        workers = [*impostors, _worker(root, "worker", conductor, {"MSTAR_CLUSTER_SECRET": SECRET})]
        server.wait_ready()
        joined = re.search(r"remote_worker_joined.*address=(tcp://[\d.]+:\d+)", server.log())
        ports = {"api server": f"tcp://127.0.0.1:{base + 1}", "conductor": conductor,
                 "worker 0": f"tcp://127.0.0.1:{base + 2}", "worker 1": joined.group(1)}
        yield server, ports, root
    finally:
        server.stop()
        for proc, log in workers:
            if proc.poll() is None:
                proc.kill()
            log.close()


def chat(server: Server) -> str:
    """A chat request that must succeed within 2 s; the fingerprint its answer names."""
    start = time.monotonic()
    resp = httpx.post(server.url + "/v1/chat/completions", headers=server.headers, timeout=10,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
    assert resp.status_code == 200, resp.text
    assert time.monotonic() - start < 2.0
    assert resp.json()["system_fingerprint"] == resp.headers["x-mstar-settings-fingerprint"]
    return resp.json()["system_fingerprint"]


def fingerprints(server: Server, root) -> set[str]:
    """Every process's fingerprint: the API server's (a chat within 2 s, /v1/config, /metrics),
    the conductor's and each worker's (logged when ready, and by every reload they apply)."""
    config = httpx.get(server.url + "/v1/config", headers=server.headers, timeout=5).json()
    metric = re.search(r'^mstar_settings_info\{fingerprint="(\w+)"\}', server.metrics_text(), re.M)
    logs = server.log() + (root / "worker.log").read_text()
    logged = re.findall(r"(?:worker_loaded|workers_ready|settings_applied).*fingerprint=(\w+)",
                        logs)
    assert len(logged) == 3  # the conductor, worker 0, worker 1: ready, and no reload applied
    return {chat(server), config["fingerprint"], metric.group(1), *logged}


def zmq_send(address: str, frames: list[bytes], keys: CurveKeys | None) -> None:
    """Each frame from a fresh PUSH (with or without the cluster's keys), flushed or given up
    (without keys the handshake never completes: a send may find no peer to queue for)."""
    ctx = zmq.Context()
    sock = push_socket(ctx, address, SocketSecurity(2 * HUGE, keys))
    sock.setsockopt(zmq.SNDTIMEO, SEND_TIMEOUT_MS)
    for frame in frames:
        try:
            sock.send(frame)
        except zmq.Again:
            assert keys is None, "a peer with the secret could not send"
    sock.close(linger=LINGER_MS if keys else STRANGER_LINGER_MS)
    ctx.term()


def raw_send(address: str, data: bytes) -> None:
    """Bytes on a plain TCP connection: not even a zmq greeting."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(data)
        time.sleep(0.1)


def _params() -> m.SamplingParams:
    return m.SamplingParams(max_tokens=1)


PROBES = {
    "garbage bytes": [b"\xc1", os.urandom(4096)],
    "a truncated frame": [m.encode(m.AddRequest("x", [1, 2, 3], _params()))[:-3]],
    "a 100 MB frame": [b"\x00" * HUGE],
    "a wrong-type message": [m.encode(m.Ready("forged", 1, 1)),
                             m.encode(m.Outputs([])), m.encode(m.SettingsSync("{}"))],
    "a forged join": [m.encode(m.Join(1, 1, "tcp://127.0.0.1:9", "forged")),
                      m.encode(m.Join(1, 1, "not an address", "forged")),
                      m.encode(m.SetupDone(7, 1, "forged", "tiny", 8, 0.0, rank=9))],
    "a forged reload": [m.encode(m.ReloadSettings({"log_level": "debug"}, "forged")),
                        m.encode(m.Fatal("forged fatal"))],
    # well-formed, but what they carry does not fit: dropped as invalid (issue 33)
    "an invalid reload": [
        m.encode(m.ReloadSettings({"no_such_knob": 1}, "forged")),
        m.encode(m.ReloadSettings({**reloadable_values(WorkerSettings()), "log_level": "loud"},
                                  "forged"))],
    "an out-of-vocabulary request": [m.encode(m.AddRequest("oov", [1, 10**9], _params())),
                                     m.encode(m.AddRequest("neg", [-1], _params()))],
    "reports outside the replica table": [m.encode(m.WorkerStats(7, 0, 0, 0.0, 0)),
                                          m.encode(m.TransportDrops("intruder", {"x": 1})),
                                          m.encode(m.Alive(0, 1))],
}


PROCESSES = ("api server", "conductor", "worker 0", "worker 1")


@pytest.mark.parametrize("process", PROCESSES)
def test_a_port_survives_every_probe(cluster, process):
    server, ports, root = cluster
    address = ports[process]
    expected = fingerprints(server, root)
    assert len(expected) == 1
    raw_send(address, os.urandom(4096))
    raw_send(address, b"\xff" + b"\x00" * 8 + b"\x7f")  # a zmq greeting cut short
    assert fingerprints(server, root) == expected, "raw bytes"
    for probe, frames in PROBES.items():
        zmq_send(address, frames, None)  # no secret: CURVE refuses the peer
        assert fingerprints(server, root) == expected, f"{probe} without the secret"
        if probe != "a forged reload":  # a secret holder's reload or fatal is obeyed
            zmq_send(address, frames, CurveKeys.from_secret(SECRET))
            assert fingerprints(server, root) == expected, f"{probe} with the secret"


def test_each_process_counted_and_logged_its_drops_and_nothing_else(cluster):
    server, ports, root = cluster
    text = server.metrics_text()
    for process in ports:
        label = process.replace(" ", "_") if process == "api server" else process
        for reason in ("undecodable", "unexpected_type", "invalid"):
            found = re.search(rf'^mstar_transport_dropped_frames\{{process="{label}",'
                              rf'reason="{reason}"\}} (\S+)$', text, re.M)
            assert found and float(found.group(1)) >= 1, (process, reason, text[-2000:])
    logs = server.log() + "".join(p.read_text() for p in root.glob("*.log"))
    assert "Traceback" not in logs
    assert "settings_applied" not in logs and "forged fatal" not in logs
    assert "frame_dropped" in logs


def test_the_api_key_is_in_no_log_and_no_worker(cluster):
    server, _, root = cluster
    worker_log = (root / "worker.log").read_text()
    assert "remote_worker_stopped" not in worker_log  # still serving
    for log in [server.log(), *(p.read_text() for p in root.glob("*.log"))]:
        assert API_KEY not in log and SECRET not in log
    assert re.search(r"join_refused.*MSTAR_CLUSTER_SECRET", (root / "no-secret.log").read_text())
    assert "join_failed" in (root / "wrong-secret.log").read_text()
    # the API key is still enforced by the API server itself
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=10,
                      json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
    assert resp.status_code == 401


# Obeyed from any secret holder by design: they stop serving, fail it, mark replicas down or set
# the drop counts the test above reads; so is a reload of valid values (it changes fingerprints).
OBEYED = (m.Shutdown, m.Fatal, m.Liveness, m.TransportDrops)
RELOADABLE = set(reloadable_values(WorkerSettings()))
RANDOM = messages(WorkerSettings(), tuple(t for t in m.TO_API + m.TO_CONDUCTOR + m.TO_WORKER
                                          + m.TO_JOINING_WORKER if t not in OBEYED)).filter(
    lambda msg: not isinstance(msg, m.ReloadSettings) or set(msg.values) != RELOADABLE)


@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(batch=st.lists(RANDOM, min_size=1, max_size=12))
def test_random_well_formed_messages_to_every_port_leave_serving_up(cluster, batch):
    server, ports, root = cluster
    frames = [m.encode(msg) for msg in batch]
    started = [msg.request_id for msg in batch if isinstance(msg, m.AddRequest)]
    for process, address in ports.items():  # requests that fit run: abort them after
        abort = [m.encode(m.AbortRequests(started))] if process.startswith("worker") else []
        zmq_send(address, frames + abort, CurveKeys.from_secret(SECRET))
    chat(server)
    assert "Traceback" not in server.log() + (root / "worker.log").read_text()
