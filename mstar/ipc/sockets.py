"""The one socket helper: PUSH to send, PULL to receive, and draining everything queued.

All of mstar's traffic is zmq PUSH/PULL: a PULL socket is bound by its one reader, PUSH sockets
connect to it. Sends never block (PUSH queues), so nobody awaits a send.

Every socket applies the instance's ``SocketSecurity``: CURVE over tcp (bound sockets are the
servers; a peer without the cluster secret never completes the handshake), and the frame limit:
a receiver sets ``MAXMSGSIZE`` (zmq closes the connection of a peer that sends more, before
reading it), a sender refuses to send more (``MessageTooLarge``). Every frame received is checked
before anyone sees it: one that does not decode, is not a message this inbox ``accepts``, or
carries values outside the inbox's ``bounds`` (``mstar.ipc.inbox_checks``) is dropped, counted on
its inbox (``dropped_frames``) and logged at most once per peer and minute. A receive never raises
on what a peer sent.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import msgspec
import structlog
import zmq

from mstar.ipc.check_rules import Invalid
from mstar.ipc.inbox_checks import INVALID, UNDECODABLE, UNEXPECTED_TYPE, InboxBounds, check
from mstar.ipc.messages import Message, TransportDrops, decode, encode
from mstar.ipc.security import SocketSecurity

log = structlog.get_logger(__name__)

LINGER_MS = 1000  # on close, how long queued messages may still go out
DROP_LOG_INTERVAL_S = 60.0  # a peer's dropped frames are logged at most this often


class MessageTooLarge(ValueError):
    """A message over MSTAR_MAX_MESSAGE_MB: its receiver would drop it, so it is not sent."""


class Outbox(zmq.Socket):
    """A connected PUSH socket; ``limit``: the largest frame its peer accepts."""

    limit: int = 0


class Inbox(zmq.Socket):
    """A bound PULL socket that admits only well-formed frames of the messages it ``accepts``,
    whose values fit its ``bounds`` (its owner replaces them once it knows more: a worker's
    model's vocabulary once it is loaded)."""

    accepts: tuple[type, ...] = ()
    bounds: InboxBounds | None = None
    dropped: Counter | None = None  # reason -> frames dropped so far
    reported: int = 0  # dropped frames already reported by ``drops_report``
    logged_at: dict | None = None  # peer -> when its drops were last logged


def push_socket(ctx: zmq.Context, address: str, security: SocketSecurity) -> Outbox:
    """A PUSH socket connected to ``address``; zmq.ZMQError (nothing left open) when it cannot be."""
    sock = ctx.socket(zmq.PUSH, socket_class=Outbox)
    sock.setsockopt(zmq.LINGER, LINGER_MS)
    sock.limit = security.max_message_bytes
    if security.keys is not None:
        sock.curve_secretkey = security.keys.client_secret
        sock.curve_publickey = security.keys.client_public
        sock.curve_serverkey = security.keys.server_public
    return _attached(sock, sock.connect, address)


def pull_socket(ctx: zmq.Context, address: str, security: SocketSecurity,
                accepts: tuple[type, ...], bounds: InboxBounds) -> Inbox:
    sock = ctx.socket(zmq.PULL, socket_class=Inbox)
    sock.accepts, sock.bounds = accepts, bounds
    sock.dropped, sock.logged_at = Counter(), {}
    sock.setsockopt(zmq.MAXMSGSIZE, security.max_message_bytes)
    if security.keys is not None:
        sock.curve_secretkey = security.keys.server_secret
        sock.curve_publickey = security.keys.server_public
        sock.curve_server = True
    return _attached(sock, sock.bind, address)


def _attached(sock: zmq.Socket, attach: Callable[[str], object], address: str) -> zmq.Socket:
    """``sock`` once ``attach`` (its connect or bind) took ``address``; closed, and the
    zmq.ZMQError raised, when it could not."""
    try:
        attach(address)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock


def encode_within(limit: int, msg: Message) -> bytes:
    """The bytes of ``msg``; MessageTooLarge when over ``limit``, the frame limit of the inbox it
    goes to (every inbox of an instance has the same: ``SocketSecurity.max_message_bytes``)."""
    data = encode(msg)
    if len(data) > limit:
        raise MessageTooLarge(f"a {type(msg).__name__} message of {len(data)} bytes exceeds "
                              f"MSTAR_MAX_MESSAGE_MB ({limit} bytes)")
    return data


def send(sock: Outbox, msg: Message) -> None:
    sock.send(encode_within(sock.limit, msg), copy=False)


# ``EVENTS`` as a plain int: ``events & zmq.POLLIN`` would build an IntFlag member each time
POLLIN = int(zmq.POLLIN)


def drain(sock: Inbox) -> list[Message]:
    """Every well-formed message already queued on a PULL socket, without waiting.

    It asks the socket (``EVENTS``) before each receive rather than receiving until zmq raises
    Again: the exception costs more than the question, and a drain is made per received batch.
    Reading ``EVENTS`` also resets the socket's descriptor for an event loop's reader.
    """
    msgs = []
    while sock.get(zmq.EVENTS) & POLLIN:
        try:
            data = sock.recv(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            break
        msg = admit(sock, data)
        if msg is not None:
            msgs.append(msg)
    return msgs


def receive(sock: Inbox, timeout_ms: int) -> list[Message]:
    """Every queued message, waiting up to ``timeout_ms`` for the first one."""
    if not sock.poll(timeout_ms):
        return []
    return drain(sock)


def admit(sock: Inbox, data: zmq.Frame) -> Message | None:
    """The message in one frame, or None (counted and logged) when it is not one for ``sock``."""
    try:
        msg = decode(data.buffer)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return _drop(sock, data, UNDECODABLE, str(exc))
    if not isinstance(msg, sock.accepts):
        return _drop(sock, data, UNEXPECTED_TYPE, type(msg).__name__)
    try:
        check(msg, sock.bounds)
    except Invalid as exc:
        return _drop(sock, data, INVALID, f"{type(msg).__name__}: {exc}")
    return msg


def _drop(sock: Inbox, data: zmq.Frame, reason: str, detail: str) -> None:
    sock.dropped[reason] += 1
    peer = _peer(data)
    now = time.monotonic()
    if now - sock.logged_at.get(peer, -DROP_LOG_INTERVAL_S) >= DROP_LOG_INTERVAL_S:
        sock.logged_at[peer] = now
        log.warning("frame_dropped", socket=sock.last_endpoint.decode(), peer=peer, reason=reason,
                    detail=detail[:200], dropped_so_far=dict(sock.dropped),
                    note=f"further drops from this peer are not logged for "
                         f"{DROP_LOG_INTERVAL_S:g} s")
    return None


def _peer(data: zmq.Frame) -> str:
    try:
        return data.get("Peer-Address") or "local"
    except zmq.ZMQError:  # ipc and inproc frames have no peer address
        return "local"


def dropped_frames(sock: Inbox) -> dict[str, int]:
    """Frames dropped on this inbox so far, by reason."""
    return dict(sock.dropped)


def drops_report(sock: Inbox, process: str) -> TransportDrops | None:
    """A report for the API server when ``sock`` dropped frames since the last report."""
    total = sum(sock.dropped.values())
    if total == sock.reported:
        return None
    sock.reported = total
    return TransportDrops(process, dict(sock.dropped))
