"""An encoder node of the model's walk graph in a process of its own (MSTAR_ENCODER_PLACEMENT
``node=process``), beside the worker that runs the language model.

The worker starts one ``EncoderNodeProcess`` per such node before it builds its engine and hands
the engine its call (``LLMEngine(placed_nodes=...)``): the runner calls it where it would call
the node in-process, on a miss of its encoder cache. A call sends the part's encoder input as an
``EncodeRequest`` and waits for the ``EncodedOutput`` (typed messages over the transport's ZeroMQ
sockets, checked on arrival like every other); the node process loads the model's weights,
keeps the node's call and answers each request in order. It dies with its worker
(``enter_child``), and a dead node fails the worker's step, so the worker's requests fail as a
dead worker's do (503).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
import zmq

from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.lifecycle import enter_child, exit_now
from mstar.ipc.parts import tensors_from_wire, tensors_to_wire
from mstar.ipc.security import SocketSecurity
from mstar.ipc.sockets import pull_socket, push_socket, receive, send

if TYPE_CHECKING:
    import torch

    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

POLL_MS = 100
STOP_WAIT_S = 5.0


def _load_node(settings: WorkerSettings, node: str):
    """The node's call, on the model loaded as the worker loads it."""
    from transformers import AutoConfig

    from mstar.engine.placement import resolve_device_dtype
    from mstar.models.loading.loader import load_model
    from mstar.models.loading.resolve import resolve_model_dir
    from mstar.models.loading.shipped import weights_quantization

    model_dir = resolve_model_dir(settings)
    device, dtype = resolve_device_dtype(settings, model_dir)
    model = load_model(model_dir, AutoConfig.from_pretrained(model_dir), device, dtype,
                       quantization=weights_quantization(settings, model_dir, device),
                       cache_dir=settings.cache_dir)
    return model.encoder_nodes()[node], device


def main() -> None:
    """``python -m mstar.worker.encoder_node NODE INBOX OUTBOX MAX_MESSAGE_BYTES``, the worker's
    settings as JSON on stdin (a worker is a daemonic process: multiprocessing gives it no
    children, so it starts this one as a subprocess)."""
    from mstar.settings.wire import settings_from_json

    node, inbox, outbox, limit = sys.argv[1:5]
    encoder_node_main(settings_from_json(sys.stdin.read()), node, inbox, outbox,
                      SocketSecurity(int(limit)))


def encoder_node_main(settings: WorkerSettings, node: str, inbox: str, outbox: str,
                      security: SocketSecurity) -> None:
    """The node process: load, say ready, answer each ``EncodeRequest`` until ``Shutdown``."""
    enter_child(settings)
    import torch

    call, device = _load_node(settings, node)
    ctx = zmq.Context()
    requests = pull_socket(ctx, inbox, security, m.TO_ENCODER_NODE, InboxBounds.of(settings))
    replies = push_socket(ctx, outbox, security)
    send(replies, m.EncoderNodeReady(node))
    while True:
        for msg in receive(requests, POLL_MS):
            if isinstance(msg, m.Shutdown):
                exit_now(0)
            tensors = {k: v.to(device) for k, v in tensors_from_wire(msg.tensors).items()}
            with torch.inference_mode():
                out = call(tensors).cpu()
            send(replies, m.EncodedOutput(msg.call, tensors_to_wire({"output": out})["output"]))


class EncoderNodeProcess:
    """The worker's handle on one node process: call it like the node itself."""

    def __init__(self, settings: WorkerSettings, node: str, max_message_bytes: int) -> None:
        """The sockets are ipc in a private directory of their own (0700, as the instance's)."""
        from mstar.settings.wire import settings_to_json

        self.node = node
        self.dir = Path(tempfile.mkdtemp(prefix="mstar-node-", dir=settings.socket_dir))
        to_node, from_node = f"ipc://{self.dir}/requests", f"ipc://{self.dir}/replies"
        security = SocketSecurity(max_message_bytes)
        self.ctx = zmq.Context()
        self.replies = pull_socket(self.ctx, from_node, security, m.FROM_ENCODER_NODE,
                                   InboxBounds.of(settings))
        self.requests = push_socket(self.ctx, to_node, security)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mstar.worker.encoder_node", node, to_node, from_node,
             str(max_message_bytes)], stdin=subprocess.PIPE, text=True)
        self.proc.stdin.write(settings_to_json(settings))
        self.proc.stdin.close()
        self.calls = 0
        self._wait(m.EncoderNodeReady, settings.startup_timeout_s)
        log.info("encoder_node_ready", node=node, pid=self.proc.pid)

    def __call__(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        self.calls += 1
        device = next(iter(tensors.values())).device
        send(self.requests, m.EncodeRequest(self.calls, tensors_to_wire(
            {k: v.cpu() for k, v in tensors.items()})))
        reply = self._wait(m.EncodedOutput, None)
        if reply.call != self.calls:
            raise RuntimeError(f"encoder node {self.node} answered call {reply.call}, "
                               f"not {self.calls}")
        return tensors_from_wire({"output": reply.output})["output"].to(device)

    def _wait(self, kind: type, timeout_s: float | None):
        """The next message of ``kind``; a RuntimeError when the process is gone or the time
        (``timeout_s``, None: no limit) is up."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            for msg in receive(self.replies, POLL_MS):
                if isinstance(msg, kind):
                    return msg
            if self.proc.poll() is not None:
                raise RuntimeError(f"encoder node {self.node}'s process exited "
                                   f"(code {self.proc.returncode})")
        raise RuntimeError(f"encoder node {self.node} was not ready within {timeout_s} s")

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


def start_placed_nodes(settings: WorkerSettings, nodes: tuple[str, ...],
                       max_message_bytes: int) -> dict[str, EncoderNodeProcess]:
    """One process per node placed apart; those already started are stopped if one fails."""
    started: dict[str, EncoderNodeProcess] = {}
    try:
        for node in nodes:
            started[node] = EncoderNodeProcess(settings, node, max_message_bytes)
    except BaseException:
        for proc in started.values():
            proc.close()
        raise
    return started


if __name__ == "__main__":
    main()
