"""``mstar worker``: one replica on another host, joining the conductor over tcp.

It binds its command socket, sends JOIN to the conductor and takes the conductor's settings from
the answer (logging every knob where its own differ), then starts the replica's rank processes
here (a tensor-parallel group meets on this host's loopback) and waits for them, telling the
conductor it is alive meanwhile (``Alive``, see ``mstar.conductor.liveness``). It exits when they
do: 0 after the conductor's shutdown, non-zero (and stopping the other ranks) when one fails.
"""

from __future__ import annotations

import contextlib
import os
from multiprocessing.connection import wait

import structlog
import zmq

from mstar.engine.rendezvous import Rendezvous, free_port
from mstar.ipc import messages as m
from mstar.ipc.endpoints import Endpoints, remote_endpoints
from mstar.ipc.heartbeat import heartbeat_s
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.lifecycle import start_child
from mstar.ipc.messages import TO_JOINING_WORKER
from mstar.ipc.security import MissingClusterSecret, SocketSecurity, joining_security
from mstar.ipc.sockets import pull_socket, push_socket, receive, send
from mstar.settings import WorkerSettings
from mstar.settings.wire import differences, settings_from_json
from mstar.worker.process import worker_main

log = structlog.get_logger(__name__)

JOIN_RETRY_MS = 1000


def fetch_settings(local: WorkerSettings, conductor: str, replica: int, host: str,
                   security: SocketSecurity) -> tuple[WorkerSettings, str]:
    """Join the conductor; (its settings, this replica's command address). Without the cluster
    secret the conductor never hears the JOIN (CURVE), and this times out."""
    ctx = zmq.Context()
    inbox = pull_socket(ctx, f"tcp://{host}:*", security, TO_JOINING_WORKER,
                        InboxBounds.of(local))
    address = inbox.getsockopt_string(zmq.LAST_ENDPOINT)
    to_conductor = push_socket(ctx, conductor, security)
    try:
        join = m.Join(replica, os.getpid(), address, local.fingerprint())
        waited_ms = 0.0
        while True:  # the conductor may not be up yet: ask again until it answers
            send(to_conductor, join)
            for msg in receive(inbox, JOIN_RETRY_MS):
                if isinstance(msg, m.SettingsSync):
                    return settings_from_json(msg.settings_json), address
            waited_ms += JOIN_RETRY_MS
            if waited_ms > local.startup_timeout_s * 1000:
                raise TimeoutError(f"no answer from the conductor at {conductor} after "
                                   f"startup_timeout_s={local.startup_timeout_s:g} (is it up, "
                                   "and is MSTAR_CLUSTER_SECRET the same as the serving host's?)")
    finally:
        inbox.close(linger=0)
        to_conductor.close(linger=0)
        ctx.term()


def run_remote_worker(local: WorkerSettings, conductor: str, replica: int, host: str) -> int:
    try:
        security = joining_security(local)
    except MissingClusterSecret as exc:
        log.error("join_refused", reason=str(exc))
        return 1
    try:
        settings, address = fetch_settings(local, conductor, replica, host, security)
    except TimeoutError as exc:
        log.error("join_failed", reason=str(exc))
        return 1
    changed = differences(local, settings)
    if changed:
        log.warning("settings_differ_from_conductor", knobs=sorted(changed),
                    values={k: {"here": a, "conductor": b} for k, (a, b) in changed.items()})
    endpoints = remote_endpoints(conductor, replica, address, security)
    size = settings.tensor_parallel_size
    port = free_port("127.0.0.1") if size > 1 else 0
    procs = []
    for rank in range(size):
        rendezvous = Rendezvous("127.0.0.1", port, rank, size) if size > 1 else None
        procs.append(start_child(worker_main, (settings, replica, endpoints, rendezvous),
                                 f"mstar-worker-{replica}-rank-{rank}", daemon=True))
        log.info("worker_started", worker=replica, pid=procs[-1].pid, rank=rank)
    code = supervise(procs, settings, endpoints, replica)
    log.info("remote_worker_stopped", worker=replica, exit_code=int(code))
    return int(code)


def supervise(procs: list, settings: WorkerSettings, endpoints: Endpoints, replica: int) -> bool:
    """Wait for the rank processes, sending the conductor a heartbeat between; True when one
    failed (the others are then killed)."""
    ctx = zmq.Context()
    to_conductor = push_socket(ctx, endpoints.conductor, endpoints.security)
    to_conductor.setsockopt(zmq.SNDTIMEO, 0)  # never wait: a late heartbeat is worth nothing
    alive = m.Alive(replica, os.getpid())
    code = False
    try:
        while procs:
            with contextlib.suppress(zmq.Again):  # the conductor's queue is full: it is gone
                send(to_conductor, alive)
            for sentinel in wait([p.sentinel for p in procs], heartbeat_s(
                    settings.liveness_interval_s)):
                proc = next(p for p in procs if p.sentinel == sentinel)
                proc.join()
                procs.remove(proc)
                code = code or (proc.exitcode != 0)
            if code:
                for proc in procs:
                    proc.kill()
    finally:
        to_conductor.close(linger=0)
        ctx.term()
    return code
