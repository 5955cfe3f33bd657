"""Each thread's CPU and wake-ups per output token while serving, at one stream and at 32.

    PYTHONPATH=CHECKOUT .venv/bin/python -m benchmark.serve_thread_cpu [--knob NAME=VALUE ...]

Starts ``mstar serve`` (default settings unless a knob says otherwise; ``dtype=auto`` always),
warms it, then streams host_overhead's workload to it with the benchmarks' client: its first 8
requests one at a time, then all 64 at 32 in flight. For every thread of the server's processes
and of this client it prints the CPU (``/proc/<pid>/task/<tid>/schedstat``, nanoseconds) and the
voluntary context switches (wake-ups) per output token. On a machine whose cores the worker's
OpenMP threads fill, whatever the other threads spend per token is what serving costs beyond
offline (docs/worker_loop.rst, "Served against offline at a 5 ms step").
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmark.host_overhead import (
    CONCURRENCY,
    NUM_REQUESTS,
    output_lens,
    process_tree,
    served,
    start_server,
)
from benchmark.runner_client import run_client
from benchmark.serve_matrix import stop

C1_REQUESTS = 8
Sample = dict[tuple[str, str, str], tuple[int, int]]  # (role, name, tid) -> (wake-ups, cpu ns)


def snapshot(roles: dict[int, str]) -> Sample:
    """Every live thread's voluntary context switches and CPU nanoseconds so far."""
    out: Sample = {}
    for pid, role in roles.items():
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                status = (task / "status").read_text().splitlines()
                wakeups = int(next(s for s in status if s.startswith("voluntary_ctxt")).split()[1])
                cpu_ns = int((task / "schedstat").read_text().split()[0])
                name = (task / "comm").read_text().strip()
            except (OSError, StopIteration):
                continue
            out[(role, name, task.name)] = (wakeups, cpu_ns)
    return out


def report(label: str, before: Sample, after: Sample, tokens: int, min_us: float) -> None:
    print(label)
    rows = []
    for key, (wakeups, cpu_ns) in after.items():
        w0, c0 = before.get(key, (0, 0))
        rows.append(((cpu_ns - c0) / tokens / 1e3, (wakeups - w0) / tokens, key))
    for cpu_us, wakeups, (role, name, tid) in sorted(rows, reverse=True):
        if cpu_us >= min_us or wakeups >= 0.05:
            print(f"  {role:<11} {name:<16} {tid:<8} wake-ups/token {wakeups:6.2f}  "
                  f"CPU us/token {cpu_us:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--knob", action="append", default=[],
                        help="NAME=VALUE settings knob for the server")
    parser.add_argument("--min-us", type=float, default=1.0,
                        help="leave out threads below this CPU per token (and 0.05 wake-ups)")
    parser.add_argument("--log", type=Path, default=Path("/tmp/mstar_serve_thread_cpu.log"))
    args = parser.parse_args()
    proc, url = start_server(["dtype=auto", *args.knob], args.log)
    try:
        run_client(served(url, [8, 8], 2))  # warm-up
        roles = process_tree(proc.pid) | {os.getpid(): "client"}
        lens = output_lens(NUM_REQUESTS)
        for concurrency, run in ((1, lens[:C1_REQUESTS]), (CONCURRENCY, lens)):
            before = snapshot(roles)
            tok_s, _ = run_client(served(url, run, concurrency))
            after = snapshot(roles)
            report(f"c={concurrency}: {tok_s:.1f} output tok/s", before, after, sum(run),
                   args.min_us)
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
