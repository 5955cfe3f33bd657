"""The socket helper's guard, in one process: whatever a peer sends, a receive returns only the
messages its inbox accepts, counts the rest, and never raises; over tcp a peer without the
cluster secret delivers nothing; the conductor drops out-of-range SETUP_DONE and unusable JOINs."""

from __future__ import annotations

import time
from collections import Counter
from types import SimpleNamespace

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_helpers import free_port

from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.security import CurveKeys, SocketSecurity
from mstar.ipc.sockets import (
    MessageTooLarge,
    admit,
    dropped_frames,
    drops_report,
    pull_socket,
    push_socket,
    receive,
    send,
)

LIMIT = 4096
STOP = m.Shutdown("bye")
BOUNDS = InboxBounds(replicas=1)


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.term()


@pytest.fixture
def pair(ctx, tmp_path):
    """An inbox accepting what a worker accepts, and a raw PUSH into it (ipc)."""
    address = f"ipc://{tmp_path}/inbox"
    inbox = pull_socket(ctx, address, SocketSecurity(LIMIT), m.TO_WORKER, BOUNDS)
    raw = ctx.socket(zmq.PUSH)
    raw.connect(address)
    yield inbox, raw
    raw.close(linger=0)
    inbox.close(linger=0)


def collect(inbox, want: int = 1, timeout_s: float = 5.0) -> list[m.Message]:
    """Receive until a Shutdown (sent last) arrives."""
    got: list[m.Message] = []
    deadline = time.monotonic() + timeout_s
    while not any(isinstance(x, m.Shutdown) for x in got) and time.monotonic() < deadline:
        got += receive(inbox, 100)
    return got


@pytest.mark.parametrize(("frame", "reason"), [
    (b"\xc1", "undecodable"),
    (bytes(range(256)) * 16, "undecodable"),
    (m.encode(m.AddRequest("r", [1, 2, 3], m.SamplingParams()))[:-2], "undecodable"),
    (m.encode(m.Ready("model", 64, 1)), "unexpected_type"),
    (m.encode(m.Join(0, 1, "tcp://x", "f")), "unexpected_type"),
    (m.encode(m.AddRequest("r", [1, 2, 3], m.SamplingParams())), "invalid"),  # no model loaded
    (m.encode(m.ReloadSettings({"no_such_knob": 1}, "f")), "invalid"),
])
def test_a_bad_frame_is_dropped_counted_and_the_next_one_arrives(pair, frame, reason):
    inbox, raw = pair
    raw.send(frame)
    raw.send(m.encode(STOP))
    assert collect(inbox) == [STOP]
    assert dropped_frames(inbox) == {reason: 1}
    report = drops_report(inbox, "worker 0")
    assert report == m.TransportDrops("worker 0", {reason: 1})
    assert drops_report(inbox, "worker 0") is None  # reported once, until the count changes


def test_a_frame_over_the_limit_never_arrives_and_is_never_sent(ctx, pair):
    inbox, raw = pair
    raw.send(b"\x00" * (LIMIT + 1))  # zmq (MAXMSGSIZE) drops the connection: nothing arrives
    assert receive(inbox, 300) == []
    out = push_socket(ctx, inbox.last_endpoint.decode(), SocketSecurity(LIMIT))
    try:
        with pytest.raises(MessageTooLarge, match="MSTAR_MAX_MESSAGE_MB"):
            send(out, m.AbortRequests(["x" * LIMIT]))
        send(out, STOP)
        assert collect(inbox) == [STOP]
    finally:
        out.close(linger=0)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_give_an_accepted_message_or_nothing(frame):
    inbox = SimpleNamespace(accepts=m.TO_WORKER, bounds=BOUNDS, dropped=Counter(), logged_at={},
                            last_endpoint=b"ipc://test")
    data = SimpleNamespace(buffer=memoryview(frame), get=lambda _: "peer")
    msg = admit(inbox, data)
    assert msg is None or isinstance(msg, m.TO_WORKER)
    assert sum(inbox.dropped.values()) == (msg is None)


def test_over_tcp_only_a_peer_with_the_secret_is_heard(ctx):
    address = f"tcp://127.0.0.1:{free_port()}"
    keys = CurveKeys.from_secret("hunter2-cluster")
    inbox = pull_socket(ctx, address, SocketSecurity(LIMIT, keys), m.TO_WORKER, BOUNDS)
    strangers = [push_socket(ctx, address, SocketSecurity(LIMIT)),  # no CURVE at all
                 push_socket(ctx, address, SocketSecurity(LIMIT, CurveKeys.from_secret("guess")))]
    member = push_socket(ctx, address, SocketSecurity(LIMIT, keys))
    try:
        for sock in strangers:
            send(sock, m.ReloadSettings({"log_level": "debug"}, "forged"))
        send(member, STOP)
        assert collect(inbox) == [STOP]
        assert receive(inbox, 300) == []  # the forged reloads never arrive
        assert "hunter2" not in repr(keys) and keys.client_secret.decode() not in repr(keys)
    finally:
        for sock in (*strangers, member, inbox):
            sock.close(linger=0)


def test_keys_are_the_same_wherever_the_secret_is():
    assert CurveKeys.from_secret("s") == CurveKeys.from_secret("s")
    assert CurveKeys.from_secret("s") != CurveKeys.from_secret("t")
    assert zmq.curve_public(CurveKeys.from_secret("s").server_secret) == \
        CurveKeys.from_secret("s").server_public


def test_conductor_drops_out_of_range_setup_and_unusable_join():
    from mstar.ipc.inbox_checks import Invalid, check
    from mstar.settings import WorkerSettings

    bounds = InboxBounds.of(WorkerSettings(num_workers=2, remote_workers=1,
                                           zmq_transport="tcp"))
    for worker, rank in ((5, 0), (0, 3), (-1, 0), (2, 0)):
        with pytest.raises(Invalid, match="worker|rank"):
            check(m.SetupDone(worker, 1, "f", "tiny", 64, 0.1, rank), bounds)
    check(m.SetupDone(1, 1, "f", "tiny", 64, 0.1, 0), bounds)
    for address in ("not an address", "tcp://", "udp://127.0.0.1:1", "tcp://127.0.0.1:x",
                    "tcp://127.0.0.1:0", "tcp://:5", "ipc:///tmp/x"):
        with pytest.raises(Invalid, match="address"):
            check(m.Join(1, 1, address, "f"), bounds)
    with pytest.raises(Invalid, match="worker=0"):  # a local replica never joins
        check(m.Join(0, 1, "tcp://127.0.0.1:5", "f"), bounds)
    check(m.Join(1, 1, "tcp://127.0.0.1:5", "f"), bounds)
