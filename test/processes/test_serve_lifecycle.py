"""`mstar serve` process lifecycle: fail fast on a bad model, two instances side by side, a graceful
drain on SIGTERM, and a worker killed with SIGKILL taking the whole tree down with clear errors."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from serve_helpers import (  # noqa: F401 - hard_timeout is an autouse fixture
    Server,
    alive,
    die_with_test,
    free_port,
    free_port_block,
    hard_timeout,
    wait_running,
)


def test_bad_model_path_fails_fast_without_traceback(tmp_path):
    missing = tmp_path / "no-such-model"
    proc = subprocess.run([sys.executable, "-m", "mstar", "serve", str(missing),
                           "--port", str(free_port())],  # the port is bound first
                          capture_output=True, text=True, timeout=60, preexec_fn=die_with_test)
    assert proc.returncode == 1
    assert str(missing) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "starting_workers" not in proc.stderr


# Tokens of a request that must be in flight when the test acts: on the long-context model
# (conftest.long_model_dir), so that it runs for seconds on a fast machine too (the tiny models'
# ~500 tokens can end before the workers' statistics ever show them running).
# seconds alone; 4000 took over 55 s in a full run on the AMX machine (other servers on the cores)
DRAINED_TOKENS = 2500
ENDLESS_TOKENS = 16000  # never ends by itself within a test's patience


@pytest.fixture(scope="module")
def servers(long_model_dir, tmp_path_factory):
    """Two instances started side by side: one on ipc, one on tcp with two workers."""
    model, small_kv = long_model_dir, {"MSTAR_CPU_KV_CACHE_GB": "0.05"}
    root = tmp_path_factory.mktemp("lifecycle")
    # The drain waits for its request up to MSTAR_SHUTDOWN_TIMEOUT_S: the default 30 s was less
    # than DRAINED_TOKENS took on a loaded machine (the request was cut, a 503), so it gets the
    # test's whole patience.
    drain = Server(model, root / "drain.log",
                   env={**small_kv, "MSTAR_SOCKET_DIR": str(root / "sockets"),
                        "MSTAR_SHUTDOWN_TIMEOUT_S": "55"})
    fault = Server(model, root / "fault.log", env={**small_kv,
        "MSTAR_NUM_WORKERS": "2", "MSTAR_MAX_NUM_SEQS": "1", "MSTAR_ZMQ_TRANSPORT": "tcp",
        "MSTAR_REQUEST_TIMEOUT_S": "3",
        "MSTAR_ZMQ_TCP_BASE_PORT": str(free_port_block(4))})
    try:
        yield {"drain": drain.wait_ready(), "fault": fault.wait_ready(), "root": root}
    finally:
        drain.stop()
        fault.stop()


def _complete(server: Server, result: dict, **body) -> None:
    resp = httpx.post(server.url + "/v1/completions", timeout=60,
                      json={"prompt": "x", "ignore_eos": True, **body})
    result["status"], result["body"] = resp.status_code, resp.json()


def test_two_instances_serve_side_by_side(servers):
    a, b = servers["drain"], servers["fault"]
    assert a.port != b.port
    results = [{}, {}]
    threads = [threading.Thread(target=_complete, args=(srv, res), kwargs={"max_tokens": 8})
               for srv, res in zip((a, b), results, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r["status"] for r in results] == [200, 200]
    assert all(r["body"]["usage"]["completion_tokens"] == 8 for r in results)


def test_sigterm_drains_in_flight_then_exits_0(servers):
    server = servers["drain"]
    result: dict = {}
    worker = threading.Thread(target=_complete, args=(server, result), kwargs={"max_tokens": DRAINED_TOKENS})
    worker.start()
    wait_running(server)
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    refused = httpx.post(server.url + "/v1/completions", json={"prompt": "x"}, timeout=10)
    assert refused.status_code == 503
    worker.join(60)
    assert result["status"] == 200
    assert result["body"]["usage"]["completion_tokens"] == DRAINED_TOKENS
    assert server.wait_exit(30) == 0
    time.sleep(0.5)
    assert not [pid for pid in server.children if alive(pid)]
    assert not list((servers["root"] / "sockets").iterdir())  # socket dir removed


def test_request_timeout_is_504_and_aborts_in_the_worker(servers):
    server = servers["fault"]
    started = time.monotonic()
    result: dict = {}
    # 8 choices on 2 workers running one sequence each: far longer than the 3 s timeout.
    _complete(server, result, max_tokens=ENDLESS_TOKENS, n=8)
    assert result["status"] == 504
    assert "request_timeout_s=3" in result["body"]["error"]["message"]
    assert time.monotonic() - started < 6
    deadline = time.monotonic() + 5
    while server.metric("mstar_num_requests_running") or server.metric("mstar_num_requests_waiting"):
        assert time.monotonic() < deadline, "timed-out requests still in the workers"
        time.sleep(0.05)


def test_worker_sigkill_fails_pending_with_503_and_exits_nonzero(servers):
    server = servers["fault"]
    pids = [int(p) for p in re.findall(r"worker_started\s+worker=\d+ pid=(\d+)", server.log())]
    assert len(pids) == 2
    result: dict = {}
    client = threading.Thread(target=_complete, args=(server, result),
                              kwargs={"max_tokens": ENDLESS_TOKENS, "n": 4})
    client.start()
    wait_running(server, 2)
    signal_sent = time.monotonic()
    subprocess.run(["kill", "-9", str(pids[0])], check=True)
    client.join(30)
    assert result["status"] == 503
    assert f"worker 0 (pid {pids[0]})" in result["body"]["error"]["message"]
    assert time.monotonic() - signal_sent < 5
    assert server.wait_exit(30) != 0
    time.sleep(0.5)
    assert not [pid for pid in server.children if alive(pid)]
    log = server.log()
    assert re.search(rf"worker_died\s+worker=0 pid={pids[0]} exitcode=-9", log)
    assert "leaked semaphore" not in log  # the killed worker held no multiprocessing semaphore


def test_api_server_sigkill_leaves_no_processes_or_sockets(tiny_model_dir, tmp_path):
    sockets = tmp_path / "sockets"
    server = Server(tiny_model_dir("llama"), tmp_path / "server.log",
                    env={"MSTAR_SOCKET_DIR": str(sockets)}).wait_ready()
    try:
        assert len(list(sockets.iterdir())) == 1  # this instance's private directory
        assert len(server.children) >= 2  # conductor and worker (and the resource tracker)
        server.proc.kill()
        server.wait_exit(10)
        deadline = time.monotonic() + 5
        while [pid for pid in server.children if alive(pid)] or list(sockets.iterdir()):
            assert time.monotonic() < deadline, "children or sockets outlived the API server"
            time.sleep(0.1)
    finally:
        server.stop()


def test_conductor_refuses_workers_with_different_settings(tmp_path):
    from mstar.conductor.conductor import Conductor, RankProcess, WorkerDied, WorkerHandle
    from mstar.ipc import messages as m
    from mstar.ipc.endpoints import make_endpoints
    from mstar.settings import WorkerSettings

    settings = WorkerSettings(num_workers=2)
    conductor = Conductor(settings, make_endpoints(settings, tmp_path))
    try:
        for i, fingerprint in enumerate([settings.fingerprint(), "0123456789abcdef"]):
            setup = m.decode(m.encode(m.SetupDone(i, 100 + i, fingerprint, "tiny", 64, 0.1)))
            process = SimpleNamespace(pid=100 + i)
            conductor.workers.append(WorkerHandle(i, [RankProcess(0, process, setup)], None, ""))
        with pytest.raises(WorkerDied, match=r"worker 1 \(pid 101\) runs with settings fingerprint "
                                             "0123456789abcdef.*refusing to start"):
            conductor.check_fingerprints()
    finally:
        conductor.inbox.close()
        conductor.to_api.close()
        conductor.ctx.term()
