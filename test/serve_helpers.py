"""Shared helpers of the `mstar serve` tests: a server in a subprocess, process-tree checks,
metrics reading, and a hard per-test timeout (import ``hard_timeout`` into a test module to use it).

Every mstar process a test starts dies with the test process (``start_mstar``, ``die_with_test``),
however that dies: a crashed or killed pytest worker leaves no `mstar serve` behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

TEST_TIMEOUT_S = 60  # hard_timeout's; pyproject's pytest-timeout bounds every other test
API_KEY = "test-key"  # the shared tiny-model API server's (test/conftest.py: api_server)
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_block(count: int) -> int:
    """A base port with ``count`` free ports from it, below Linux's ephemeral range (32768+), so
    that no client connection of another process can take one before the server binds it."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32768 - count)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no block of {count} free ports found")


def descendants(pid: int) -> set[int]:
    """All live descendant pids of pid (from /proc; psutil is not a dependency)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


_PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies (Linux)
# Loaded before any fork: a child between fork and exec must not load a library (a lock another
# thread held at the fork would never be released in the child).
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_TEST_PROCESS = os.getpid()  # the pytest process (or xdist worker) that starts the servers


def die_with_test() -> None:
    """``preexec_fn`` of every mstar process a test starts: SIGKILL when the test process dies,
    even by SIGKILL (Linux's PR_SET_PDEATHSIG; mstar's own children then follow it through
    theirs, mstar/ipc/lifecycle.py). A test process already gone by then ends the child at once."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _TEST_PROCESS:
        os._exit(1)


def start_mstar(argv: list[str], env: dict[str, str], log) -> subprocess.Popen:
    """``python -m mstar ARGV``, output to the open file ``log``: in its own process group, so that
    ``stop_tree`` ends it with every child at once, and dying with the test process."""
    return subprocess.Popen([sys.executable, "-m", "mstar", *argv], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_test)


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGKILL to whatever is left of ``start_mstar``'s process group (the process and its
    children), once the process itself has exited or was given up on."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the whole group is gone
        os.killpg(proc.pid, signal.SIGKILL)


def running_server(model_dir: Path, log_path: Path, env: dict[str, str],
                   args: tuple[str, ...] = ()) -> Iterator[Server]:
    """Body of a module-scoped server fixture: start, wait until ready, always stop."""
    srv = Server(model_dir, log_path, env, args)
    try:
        yield srv.wait_ready()
    finally:
        srv.stop()


def metric_in(text: str, name: str) -> float:
    """An unlabelled metric's value in a ``/metrics`` page."""
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


class Server:
    """`python -m mstar serve MODEL` in a subprocess, log captured to a file."""

    def __init__(self, model_dir: Path, log_path: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.model_dir = model_dir
        key = (env or {}).get("MSTAR_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
        # MSTAR_CPU_BIND off: the suite runs many servers at once on the same CPUs, where binding
        # each one's threads to the same CPUs would pile them up (test_cpu_bind_serve turns it on)
        full_env.update({"MSTAR_PORT": str(self.port), "MSTAR_DEVICE": "cpu",
                         "MSTAR_CPU_KV_CACHE_GB": "0.05", "MSTAR_CPU_BIND": "false",
                         **(env or {})})
        self.log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = start_mstar(["serve", str(model_dir), *args], full_env, self.log_file)
        self.children: set[int] = set()

    def wait_ready(self, timeout_s: float = 240) -> Server:  # generous: CI machines are shared
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    self.children = descendants(self.proc.pid)
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready after {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def metrics_text(self) -> str:
        return httpx.get(self.url + "/metrics", headers=self.headers, timeout=5).text

    def metric(self, name: str, headers: dict | None = None) -> float:
        return metric_in(httpx.get(self.url + "/metrics", headers=headers or self.headers,
                                   timeout=5).text, name)

    def wait_exit(self, timeout_s: float = 30) -> int:
        code = self.proc.wait(timeout_s)
        self.log_file.close()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()
        stop_tree(self.proc)


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail (not hang) a test that takes longer than TEST_TIMEOUT_S. pytest-timeout's timer (the
    same SIGALRM) is put back afterwards with what was left of it, so it still bounds the teardown."""
    start = time.monotonic()
    outer_left, _ = signal.setitimer(signal.ITIMER_REAL, TEST_TIMEOUT_S)
    limit = min(outer_left, TEST_TIMEOUT_S) if outer_left else TEST_TIMEOUT_S

    def expire(signum, frame):
        raise TimeoutError(f"test exceeded {limit:.0f}s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)  # the outer timer's deadline, if that comes first
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
    if outer_left:
        signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - start), 0.001))


IDLE_GAUGES = ("mstar_http_requests_in_flight", "mstar_num_requests_running",
               "mstar_num_requests_waiting", "mstar_kv_cache_usage_ratio")


def wait_idle(server: Server, timeout_s: float = 10) -> None:
    """Until nothing is in flight in the API server, nor running, waiting or holding KV blocks in
    a worker."""
    deadline = time.monotonic() + timeout_s
    while any(metric_in(server.metrics_text(), name) for name in IDLE_GAUGES):  # one scrape
        assert time.monotonic() < deadline, "server never went idle"
        time.sleep(0.05)


LONG_POSITIONS = 65536  # the speech disconnect tests' models' context
LONG_SPEECH_SECONDS = 64000 / 12.5  # their MSTAR_MAX_SPEECH_SECONDS: 64000 frames at 12.5 a s


def long_speech_server(save: Callable, tokenizer, tmp_path_factory,
                       env: dict[str, str] | None = None) -> Iterator[Server]:
    """Body of the speech disconnect tests' module-scoped server fixture: the tiny speech model
    ``save(path, tokenizer, positions=...)`` saves (``save_tiny_csm``, ``save_tiny_omni``) with
    ``LONG_POSITIONS`` positions, served float32 with ``LONG_SPEECH_SECONDS`` of speech a
    request allowed and a KV cache of 0.08 GB, so a request asking for that much runs far longer
    than a test's patience. ``env``: more knobs of the server."""
    model = save(tmp_path_factory.mktemp("speech-long"), tokenizer, positions=LONG_POSITIONS)
    yield from running_server(model, tmp_path_factory.mktemp("log") / "serve.log",
                              {"MSTAR_DTYPE": "float32",
                               "MSTAR_MAX_SPEECH_SECONDS": str(LONG_SPEECH_SECONDS),
                               "MSTAR_CPU_KV_CACHE_GB": "0.08", **(env or {})})


def raw_post(server: Server, path: str, fields: dict) -> socket.socket:
    """``fields`` as JSON to ``path`` on a raw connection, so that the test decides when it
    closes (``abandon_and_require_idle``): not a client's timeout."""
    url = urlsplit(server.url)
    body = json.dumps(fields)
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.hostname}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body.encode())
    return sock


def abandon_and_require_idle(server: Server, socks: list, running: int,
                             patience_s: float) -> None:
    """Close the raw connections ``socks`` (the clients go away) once ``running`` requests run
    and hold KV blocks; then every block must be free and nothing running or in flight within
    ``patience_s`` (``/metrics``): their requests were aborted, not run to the end."""
    try:
        wait_running(server, at_least=running)
        deadline = time.monotonic() + 30  # a usage ratio is rounded: a few blocks may read 0
        while server.metric("mstar_kv_cache_usage_ratio") == 0:
            assert time.monotonic() < deadline, "the requests never held a KV block"
            time.sleep(0.02)
    finally:
        for sock in socks:
            sock.close()
    started = time.monotonic()
    wait_idle(server, timeout_s=patience_s)
    assert time.monotonic() - started < patience_s
    assert server.metric("mstar_num_requests_running") == 0
    assert server.metric("mstar_kv_cache_usage_ratio") == 0


def wait_running(server: Server, at_least: int = 1, timeout_s: float = 60) -> None:
    """Until the workers report at least this many requests running (a loaded machine may take
    a while to admit one)."""
    deadline = time.monotonic() + timeout_s
    while server.metric("mstar_num_requests_running") < at_least:
        assert time.monotonic() < deadline, "request never started running"
        time.sleep(0.02)
