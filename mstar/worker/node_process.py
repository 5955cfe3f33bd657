"""A node of the model's walk graph in a process of its own (MSTAR_ENCODER_PLACEMENT
``node=process``), beside the worker that runs the language model: what every such node shares.

The worker side (``NodeProcess``) makes a private socket directory (0700, as the instance's),
binds the replies' PULL socket, starts ``python -m <module> NODE INBOX OUTBOX MAX_MESSAGE_BYTES``
with the worker's settings as JSON on stdin (a worker is a daemonic process: multiprocessing
gives it no children, so it starts a subprocess), waits for its ``NodeReady`` and then calls it
synchronously: one typed message out, the reply of the same call number back (``call``). A dead
node process raises there (the worker's step fails, so its requests fail as a dead worker's do:
503); ``close`` stops it by message, then by force, and removes its sockets.

The node side (``node_args``, ``enter_node``, ``serve_node``) reads those arguments, dies with
its worker (``enter_child``), takes the engine's torch threads, says ready and answers each
message in order until ``Shutdown``. What a node loads and how it answers is its own module's:
``mstar.worker.encoder_node``, ``mstar.worker.codec_node``.
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

import structlog
import zmq

from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.lifecycle import enter_child, exit_now
from mstar.ipc.security import SocketSecurity
from mstar.ipc.sockets import pull_socket, push_socket, receive, send

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

POLL_MS = 100
STOP_WAIT_S = 5.0


class NodeProcess:
    """The worker's handle on one node process. A subclass names its ``module`` (run with
    ``-m``), its ``kind`` (logs and errors) and the messages it takes back (``replies_in``)."""

    module: str
    kind: str
    replies_in: tuple[type, ...]

    def __init__(self, settings: WorkerSettings, node: str, max_message_bytes: int) -> None:
        from mstar.settings.wire import settings_to_json

        self.node = node
        self.dir = Path(tempfile.mkdtemp(prefix="mstar-node-", dir=settings.socket_dir))
        to_node, from_node = f"ipc://{self.dir}/requests", f"ipc://{self.dir}/replies"
        security = SocketSecurity(max_message_bytes)
        self.ctx = zmq.Context()
        self.replies = pull_socket(self.ctx, from_node, security, self.replies_in,
                                   InboxBounds.of(settings))
        self.requests = push_socket(self.ctx, to_node, security)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, node, to_node, from_node,
             str(max_message_bytes)], stdin=subprocess.PIPE, text=True)
        self.proc.stdin.write(settings_to_json(settings))
        self.proc.stdin.close()
        self.calls = 0
        self.ready: m.NodeReady = self._wait(m.NodeReady, settings.startup_timeout_s)
        log.info(f"{self.kind}_node_ready", node=node, pid=self.proc.pid)

    def call(self, make: Callable[[int], m.Message], reply: type):
        """Send the message ``make`` builds for the next call number; its reply (a RuntimeError
        when the process is gone or answers another call)."""
        self.calls += 1
        send(self.requests, make(self.calls))
        got = self._wait(reply, None)
        if got.call != self.calls:
            raise RuntimeError(f"{self.kind} node {self.node} answered call {got.call}, "
                               f"not {self.calls}")
        return got

    def _wait(self, kind: type, timeout_s: float | None):
        """The next message of ``kind``; a RuntimeError when the process is gone or the time
        (``timeout_s``, None: no limit) is up."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            for msg in receive(self.replies, POLL_MS):
                if isinstance(msg, kind):
                    return msg
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} node {self.node}'s process exited "
                                   f"(code {self.proc.returncode})")
        raise RuntimeError(f"{self.kind} node {self.node} was not ready within {timeout_s} s")

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


def node_args() -> tuple[WorkerSettings, str, str, str, SocketSecurity]:
    """In the node process: the worker's settings (stdin), the node's name, its inbox and
    outbox addresses and the frame limit (argv)."""
    from mstar.settings.wire import settings_from_json

    node, inbox, outbox, limit = sys.argv[1:5]
    return settings_from_json(sys.stdin.read()), node, inbox, outbox, SocketSecurity(int(limit))


def enter_node(settings: WorkerSettings) -> None:
    """The node process's start: a child's (``enter_child``: dies with its worker), and the
    engine's torch threads (MSTAR_TORCH_NUM_THREADS, where set)."""
    enter_child(settings)
    if settings.torch_num_threads:
        import torch

        torch.set_num_threads(settings.torch_num_threads)


def serve_node(settings: WorkerSettings, ready: m.NodeReady, inbox: str, outbox: str,
               security: SocketSecurity, takes: tuple[type, ...],
               answer: Callable[[m.Message], m.Message]) -> None:
    """In the node process, its node loaded: say ``ready``, then send ``answer``'s reply to
    each message (of the types in ``takes``) in order, until ``Shutdown``."""
    ctx = zmq.Context()
    requests = pull_socket(ctx, inbox, security, takes, InboxBounds.of(settings))
    replies = push_socket(ctx, outbox, security)
    send(replies, ready)
    while True:
        for msg in receive(requests, POLL_MS):
            if isinstance(msg, m.Shutdown):
                exit_now(0)
            send(replies, answer(msg))
