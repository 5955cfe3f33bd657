"""Applying a CPU binding (``mstar.settings.checks.cpu_binding``) to this process's threads.

``os.sched_setaffinity(tid, ...)`` binds one thread (``os.sched_getaffinity(tid)`` reads it); a
thread starts with the CPUs of the thread that started it, and a process with those of the thread
that spawned it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_home: set[int] | None = None  # this process's CPUs before ``bind_process`` narrowed them


def process_cpus() -> set[int]:
    """The CPUs this process may use: its calling thread's when first asked (at start, before
    any binding), remembered as the set its children start with (``spawning``)."""
    global _home
    if _home is None:
        _home = os.sched_getaffinity(0)
    return set(_home)


def bind_process(cpu: int) -> None:
    """Every thread of this process, and every thread it starts later, on ``cpu`` (the API
    server's front). Children still start with the process's home set (``spawning``)."""
    process_cpus()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), {cpu})


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Start a child process in here: it starts with the home set, not with the CPU the
    spawning thread is bound to."""
    mine = os.sched_getaffinity(0)
    if _home is None or mine == _home:  # nothing bound here
        yield
        return
    os.sched_setaffinity(0, _home)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


@contextlib.contextmanager
def threads_started_on(cpu: int) -> Iterator[None]:
    """Threads this thread starts in here (a zmq context's I/O thread) run on ``cpu``."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
