"""MSTAR_CPU_BIND served: the worker's intra-op threads one per CPU, the front (the API server's
threads, the worker's zmq I/O thread) on the last CPU, and a request still answered. The loop is
overlapped, so that the forward thread's OpenMP team (its own) is bound as well."""

import os
from collections import Counter
from pathlib import Path

import httpx
import pytest
from serve_helpers import descendants, running_server

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least 2 CPUs")


def _threads(pid: int) -> dict[int, tuple[str, set[int]]]:
    """tid -> (name, the CPUs it may use) for each thread of ``pid``."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = ((task / "comm").read_text().strip(),
                                   os.sched_getaffinity(int(task.name)))
        except OSError:  # a thread that just ended
            continue
    return out


@pytest.fixture(scope="module")
def bound_server(tiny_model_dir, tmp_path_factory):
    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("bind") / "s.log", {
        "MSTAR_CPU_BIND": "true", "MSTAR_MAX_CONSECUTIVE_SPEC_STEPS": "4"})


def test_the_engine_threads_are_bound_one_per_cpu_and_the_front_beside_them(bound_server):
    reply = httpx.post(bound_server.url + "/v1/completions", timeout=60, json={
        "prompt": "hello", "max_tokens": 8, "ignore_eos": True})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 8
    cpus = sorted(os.sched_getaffinity(bound_server.proc.pid))  # the server's own: its front
    api = _threads(bound_server.proc.pid)
    front = {cpu for _, allowed in api.values() for cpu in allowed}
    assert len(front) == 1, api  # every API server thread on one CPU
    # the worker: the one process whose main thread is bound (the conductor's is not)
    workers = [pid for pid in descendants(bound_server.proc.pid)
               if len(_threads(pid).get(pid, ("", set()))[1]) == 1]
    assert len(workers) == 1, {pid: _threads(pid) for pid in descendants(bound_server.proc.pid)}
    worker = _threads(workers[0])
    engine = sorted(os.sched_getaffinity(workers[0]) | {cpu for name, allowed in worker.values()
                                                if len(allowed) == 1 for cpu in allowed})
    assert worker[workers[0]][1] == {engine[0]}  # the main thread: the first engine CPU
    io = [allowed for name, allowed in worker.values() if name.startswith("ZMQbg/IO")]
    assert io == [front]
    # Each engine CPU has one thread of each OpenMP team: the main thread's and the forward
    # thread's (each leads its own). Torch's and Python's threads are all named after the
    # executable ("python" or "python3"), zmq's are named: the bound ones are found by their mask.
    per_cpu = Counter(cpu for name, allowed in worker.values() if len(allowed) == 1
                      and not name.startswith("ZMQbg") for cpu in allowed)
    assert per_cpu == dict.fromkeys(engine, 2), worker
    assert front == {engine[-1]}
    assert cpus == sorted(front)
