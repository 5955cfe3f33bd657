"""A crash in a test fails the run, it does not hang it: a pytest run whose test SIGKILLs its own
process (as a SIGILL in a native kernel ends it) with `mstar serve` running ends failed within a
minute, and no mstar process outlives it (test/serve_helpers.py, scripts/test.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from serve_helpers import alive

TEST_DIR = Path(__file__).resolve().parents[1]
# The run under test: one xdist worker, as scripts/test.sh runs them (worker restarts off). Its
# first test starts a server, writes the pids of the server's tree, then kills its own process.
CRASHING = '''
import os
import signal
from pathlib import Path

from serve_helpers import Server


def test_dies_with_a_server_running():
    server = Server(Path(os.environ["CRASH_MODEL"]), Path(os.environ["CRASH_DIR"]) / "server.log")
    server.wait_ready()
    pids = [server.proc.pid, *server.children]
    (Path(os.environ["CRASH_DIR"]) / "pids").write_text(" ".join(map(str, pids)))
    os.kill(os.getpid(), signal.SIGKILL)


def test_after_the_crash():
    pass
'''


def _mstar_processes_of(marker: str) -> list[int]:
    """Live processes whose command line names ``marker`` (this test's own directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline and "mstar" in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_a_killed_test_process_fails_the_run_and_leaves_no_server(tiny_model_dir, tmp_path):
    (tmp_path / "test_crashing.py").write_text(CRASHING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env |= {"CRASH_MODEL": str(tiny_model_dir("llama")), "CRASH_DIR": str(tmp_path),
            "PYTHONPATH": os.pathsep.join([str(TEST_DIR), str(TEST_DIR.parent)])}
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-n", "1", "--max-worker-restart=0", "-p", "no:randomly",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_crashing.py")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pids_file = tmp_path / "pids"
        while not pids_file.exists():  # the server starts (seconds), then the test kills itself
            assert run.poll() is None, run.communicate()[0]
            time.sleep(0.2)
        killed = time.monotonic()
        output, _ = run.communicate(timeout=60)
        assert time.monotonic() - killed < 60
    finally:
        run.kill()
    assert run.returncode != 0, output
    assert "crashed" in output, output
    server_tree = [int(pid) for pid in pids_file.read_text().split()]
    assert len(server_tree) >= 3  # the API server, the conductor and a worker at least
    deadline = time.monotonic() + 10  # SIGKILL at once; mstar's children poll for 0.5 s at most
    while [pid for pid in server_tree if alive(pid)] or _mstar_processes_of(str(tmp_path)):
        assert time.monotonic() < deadline, "mstar processes outlived the crashed test process"
        time.sleep(0.1)
