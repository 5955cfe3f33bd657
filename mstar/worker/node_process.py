"""A node of the model's walk graph in a process of its own (MSTAR_ENCODER_PLACEMENT
``node=process``), beside the worker that runs the language model: what every such process
shares, whatever its node (an encoder: ``mstar.worker.encoder_node``; a codec:
``mstar.worker.codec_node``; the talker: ``mstar.worker.talker_node``).

The worker's handle (``NodeProcess``) starts ``python -m MODULE ARGS... INBOX OUTBOX LIMIT`` with
the worker's settings as JSON on stdin (a worker is a daemonic process: multiprocessing gives it
no children, so it starts a subprocess), talks to it over two ipc sockets in a private directory
of their own (0700, as the instance's), typed messages checked on arrival like every other, and
waits for its ready message. The process (``node_child``) dies with its worker (``enter_child``);
a dead process fails the worker's next wait on it (``receive``), so the worker's step fails and
its requests fail as a dead worker's do (503). ``close`` stops it by message, then by force.

Two ways to talk to it: a node that answers each message in turn (an encoder, a codec) is
called synchronously (``call``: one numbered message out, its reply back; the process side is
``serve_node``); the talker runs a loop of its own and is sent to and received from as it goes
(``send``, ``receive``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import zmq

from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.lifecycle import enter_child, exit_now
from mstar.ipc.security import SocketSecurity
from mstar.ipc.sockets import pull_socket, push_socket, receive, send

if TYPE_CHECKING:
    from mstar.ipc.sockets import Inbox, Outbox
    from mstar.settings import WorkerSettings

POLL_MS = 100
STOP_WAIT_S = 5.0


class NodeProcess:
    """The worker's handle on one node process: ``send`` to it, ``receive`` from it."""

    def __init__(self, settings: WorkerSettings, name: str, module: str, args: list[str],
                 accepts: tuple[type, ...], ready: type, max_message_bytes: int) -> None:
        """``name``: the node, as errors name it; ``module``: the process's ``-m`` module, run
        with ``args``; ``accepts``: what it may send here; ``ready``: its first message (kept
        in ``self.ready``)."""
        from mstar.settings.wire import settings_to_json

        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix="mstar-node-", dir=settings.socket_dir))
        to_node, from_node = f"ipc://{self.dir}/requests", f"ipc://{self.dir}/replies"
        security = SocketSecurity(max_message_bytes)
        self.ctx = zmq.Context()
        self.replies = pull_socket(self.ctx, from_node, security, accepts,
                                   InboxBounds.of(settings))
        self.requests = push_socket(self.ctx, to_node, security)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, to_node, from_node, str(max_message_bytes)],
            stdin=subprocess.PIPE, text=True)
        self.calls = 0  # numbered synchronous calls made (``call``)
        try:
            self.proc.stdin.write(settings_to_json(settings))
            self.proc.stdin.close()
            self.ready = self.wait(ready, settings.startup_timeout_s)
        except BaseException:  # not ready: nothing of it is left behind
            self.close()
            raise

    def send(self, msg: m.Message) -> None:
        send(self.requests, msg)

    def call(self, make: Callable[[int], m.Message], reply: type):
        """Send the message ``make`` builds for the next call number; its reply (a RuntimeError
        when the process is gone or answers another call)."""
        self.calls += 1
        self.send(make(self.calls))
        got = self.wait(reply, None)
        if got.call != self.calls:
            raise RuntimeError(f"node {self.name} answered call {got.call}, not {self.calls}")
        return got

    def receive(self, timeout_ms: int) -> list[m.Message]:
        """What the process sent, waiting up to ``timeout_ms`` for the first; a RuntimeError when
        nothing came and the process is gone."""
        msgs = receive(self.replies, timeout_ms)
        if not msgs and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.name}'s process exited (code {self.proc.returncode})")
        return msgs

    def wait(self, kind: type, timeout_s: float | None):
        """The next message of ``kind`` (others are dropped); a RuntimeError when the process is
        gone or the time (``timeout_s``, None: no limit) is up."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            for msg in self.receive(POLL_MS):
                if isinstance(msg, kind):
                    return msg
        raise RuntimeError(f"node {self.name} was not ready within {timeout_s} s")

    def close(self) -> None:
        """Stop the process (by message, then by force) and remove its sockets."""
        if self.proc.poll() is None:
            send(self.requests, m.Shutdown())
            try:
                self.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for sock in (self.requests, self.replies):
            sock.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)


def node_child(accepts: tuple[type, ...]) -> tuple[WorkerSettings, list[str], Inbox, Outbox]:
    """The process's side, first thing in its ``main``: the worker's settings, the module's own
    arguments, and its sockets (in: the messages of ``accepts``; out: to its worker). It dies
    with its worker (``enter_child``) and takes the engine's torch threads
    (MSTAR_TORCH_NUM_THREADS, where set)."""
    from mstar.settings.wire import settings_from_json

    settings = settings_from_json(sys.stdin.read())
    *args, inbox, outbox, limit = sys.argv[1:]
    enter_child(settings)
    if settings.torch_num_threads:
        import torch

        torch.set_num_threads(settings.torch_num_threads)
    security = SocketSecurity(int(limit))
    ctx = zmq.Context()
    requests = pull_socket(ctx, inbox, security, accepts, InboxBounds.of(settings))
    return settings, args, requests, push_socket(ctx, outbox, security)


def serve_node(requests: Inbox, replies: Outbox, ready: m.Message,
               answer: Callable[[m.Message], m.Message]) -> None:
    """A node that answers each message in turn, its node loaded: say ``ready``, then send
    ``answer``'s reply to each message in order, until ``Shutdown``."""
    send(replies, ready)
    while True:
        for msg in receive(requests, POLL_MS):
            if isinstance(msg, m.Shutdown):
                exit_now(0)
            send(replies, answer(msg))
