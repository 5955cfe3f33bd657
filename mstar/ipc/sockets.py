"""The one socket helper: PUSH to send, PULL to receive, and draining everything queued.

All of mstar's traffic is zmq PUSH/PULL: a PULL socket is bound by its one reader, PUSH sockets
connect to it. Sends never block (PUSH queues), so nobody awaits a send.
"""

from __future__ import annotations

import zmq

from mstar.ipc.messages import Message, decode, encode

LINGER_MS = 1000  # on close, how long queued messages may still go out


def push_socket(ctx: zmq.Context, address: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.connect(address)
    return sock


def pull_socket(ctx: zmq.Context, address: str) -> zmq.Socket:
    sock = ctx.socket(zmq.PULL)
    sock.bind(address)
    return sock


def send(sock: zmq.Socket, msg: Message) -> None:
    sock.send(encode(msg), copy=False)


def drain(sock: zmq.Socket) -> list[Message]:
    """Every message already queued on a PULL socket, without waiting."""
    msgs = []
    while True:
        try:
            msgs.append(decode(sock.recv(zmq.NOBLOCK, copy=False).buffer))
        except zmq.Again:
            return msgs


def receive(sock: zmq.Socket, timeout_ms: int) -> list[Message]:
    """Every queued message, waiting up to ``timeout_ms`` for the first one."""
    if not sock.poll(timeout_ms):
        return []
    return drain(sock)
