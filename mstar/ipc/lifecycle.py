"""Child processes: one start-up for the conductor and the workers (spawn, logging, death signal
plus watchdog, Ctrl-C left to the API server)."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mstar.ipc.cpu_affinity import spawning
from mstar.logging_setup import configure_logging

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from mstar.settings import WorkerSettings

_PR_SET_PDEATHSIG = 1


def die_with_parent(cleanup: Callable[[], None] | None = None, poll_s: float = 0.5) -> None:
    """Exit when the parent process goes away, however it dies.

    PR_SET_PDEATHSIG covers SIGKILL of the parent on Linux; the getppid watchdog covers
    everything else (and the window before prctl took effect). With ``cleanup`` the death signal
    is SIGUSR1 so that cleanup runs first (its own children then follow through theirs).
    """
    parent = os.getppid()

    def leave(*_: object) -> None:
        if cleanup is not None:
            cleanup()
        os._exit(1)

    death_signal = signal.SIGKILL
    if cleanup is not None:
        death_signal = signal.SIGUSR1
        signal.signal(signal.SIGUSR1, leave)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, death_signal, 0, 0, 0)
    if os.getppid() != parent:
        leave()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        leave()

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def exit_now(code: int) -> None:
    """Leave a child process at once, logs flushed, without the interpreter's shutdown: that
    would wait for pool threads still at work (a grammar compile may take minutes, and the
    process would be killed after the stop timeout) and print their teardown tracebacks."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ignore_stop_signals() -> None:
    """Ctrl-C (and a service manager's SIGTERM) reach the whole process group; only the API server
    decides how to stop, and it stops its children by message, or they die with it. SIGHUP too:
    the API server reloads the settings and sends them to its children by message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def start_child(target: Callable[..., None], args: tuple, name: str,
                daemon: bool = False) -> BaseProcess:
    """Start a child process (spawn: no inherited threads or sockets); the caller watches it."""
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, name=name,
                                                        daemon=daemon)
    with spawning():  # the child gets every CPU this process had before MSTAR_CPU_BIND
        proc.start()
    return proc


def enter_child(settings: WorkerSettings, cleanup: Callable[[], None] | None = None) -> None:
    """The first thing every child process does: logging from the frozen settings, die with the
    parent (running ``cleanup`` first), and leave Ctrl-C / SIGTERM to the API server."""
    configure_logging(settings.log_level, settings.log_format)
    die_with_parent(cleanup)
    ignore_stop_signals()
