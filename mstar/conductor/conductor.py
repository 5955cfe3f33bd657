"""The conductor: starts the worker replicas, checks their settings, relays control, watches liveness.

It owns the life cycle only: requests and their outputs go between the API server and the workers
directly (READY tells the API server each replica's command address). Liveness is exact and
immediate: the process sentinel of each rank of each replica is polled next to the zmq socket. A
tensor-parallel replica is one worker here; its ranks each report SETUP_DONE and must all run with
the conductor's settings fingerprint. Replicas on other hosts
(MSTAR_REMOTE_WORKERS) join with JOIN and get the settings in return; their processes are not
the conductor's: their heartbeats are (``mstar.conductor.liveness``), and one that falls silent
degrades the server instead of ending it (see docs/distributed.rst). With
MSTAR_DISTRIBUTED_EXECUTOR=ray the ranks are Ray actors (``mstar.conductor.ray_executor``, the one
module that imports Ray), watched like processes; one lost after start-up degrades the server too.
Every message is checked at the inbox (``mstar.ipc.inbox_checks``): indices against the replica
and rank tables, reloads through the settings parser.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import structlog
import zmq

from mstar.conductor.liveness import RemoteLiveness
from mstar.conductor.replica import RankProcess, WorkerHandle, describe_exit
from mstar.engine.rendezvous import check_deterministic_loop, group_rendezvous
from mstar.ipc import messages as m
from mstar.ipc.endpoints import Endpoints
from mstar.ipc.inbox_checks import InboxBounds
from mstar.ipc.lifecycle import start_child
from mstar.ipc.settings_reload import apply_reloaded
from mstar.ipc.sockets import drops_report, pull_socket, push_socket, receive, send
from mstar.settings.wire import settings_to_json
from mstar.worker.process import worker_main

if TYPE_CHECKING:
    from mstar.conductor.ray_executor import RayExecutor
    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

POLL_MS = 200
STOP_TIMEOUT_S = 10.0


class WorkerDied(Exception):
    pass


def check_remote_workers(settings: WorkerSettings) -> None:
    if settings.remote_workers > settings.num_workers:
        raise ValueError(f"remote_workers={settings.remote_workers} exceeds "
                         f"num_workers={settings.num_workers}")
    if settings.remote_workers and settings.zmq_transport != "tcp":
        raise ValueError(f"remote_workers={settings.remote_workers} needs zmq_transport=tcp")


class Conductor:
    def __init__(self, settings: WorkerSettings, endpoints: Endpoints):
        self.settings = settings
        self.endpoints = endpoints
        self.ctx = zmq.Context()
        self.security = endpoints.security
        self.bounds = InboxBounds.of(settings)  # the replica and rank tables, the remote ones
        self.inbox = pull_socket(self.ctx, endpoints.conductor, self.security, m.TO_CONDUCTOR,
                                 self.bounds)
        self.to_api = push_socket(self.ctx, endpoints.api, self.security)
        self.workers: list[WorkerHandle] = []
        self.executor: RayExecutor | None = None  # MSTAR_DISTRIBUTED_EXECUTOR=ray's actors
        self.liveness: RemoteLiveness | None = None  # once every replica is ready
        self.poller = zmq.Poller()
        self.poller.register(self.inbox, zmq.POLLIN)

    def run(self) -> int:
        """Exit code: 0 after an orderly shutdown, 1 after a fault."""
        try:
            self.start_workers()
            if not self.wait_for_setup():
                return 0
            return self.control_loop()
        except WorkerDied as exc:
            send(self.to_api, m.Fatal(str(exc)))
            return 1
        finally:
            self.stop_workers()
            channels = [w.channel for w in self.workers if w.channel is not None]
            for sock in (self.inbox, self.to_api, *channels):
                sock.close()
            self.ctx.term()

    def start_workers(self) -> None:
        try:
            check_deterministic_loop(self.settings)
            check_remote_workers(self.settings)
        except ValueError as exc:
            raise WorkerDied(str(exc)) from None
        if self.settings.distributed_executor == "ray":
            from mstar.conductor.ray_executor import RayExecutor, RayStartFailed  # Ray here only
            try:
                self.executor = RayExecutor(self.settings)
                self.workers = self.executor.start(self.endpoints, self.ctx, self.poller)
            except RayStartFailed as exc:
                raise WorkerDied(str(exc)) from None
            return
        for i, address in enumerate(self.endpoints.workers):
            if i in self.bounds.remote:
                log.info("waiting_for_remote_worker", worker=i,
                         command=f"mstar worker --conductor {self.endpoints.conductor} --replica {i}")
                ranks = [RankProcess(r, None) for r in range(self.settings.tensor_parallel_size)]
                self.workers.append(WorkerHandle(i, ranks, None, ""))
                continue
            ranks = []
            for rank, rendezvous in enumerate(group_rendezvous(self.settings, i)):
                proc = start_child(worker_main, (self.settings, i, self.endpoints, rendezvous),
                                   f"mstar-worker-{i}" + (f"-rank-{rank}" if rank else ""),
                                   daemon=True)
                log.info("worker_started", worker=i, pid=proc.pid, rank=rank)
                self.poller.register(proc.sentinel, zmq.POLLIN)
                ranks.append(RankProcess(rank, proc))
            self.workers.append(WorkerHandle(i, ranks, push_socket(self.ctx, address,
                                                                   self.security), address))

    def poll(self, timeout_ms: int) -> list[Any]:
        """Messages from the inbox; raises WorkerDied as soon as a worker process exits (naming
        every rank found dead, the ones killed by a signal first). Under Ray, once every replica
        was ready, a dead rank's replica is down instead (``lose``): the others serve on."""
        events = dict(self.poller.poll(timeout_ms))
        dead = []
        for w in self.workers:
            for r in w.ranks:
                if r.process is not None and r.process.sentinel in events:
                    self.poller.unregister(r.process.sentinel)  # readable from now on
                    r.process.join(1.0)  # the sentinel fires on exit; reaping may lag a moment
                    code = r.process.exitcode
                    log.error("worker_died", worker=w.index, pid=r.process.pid, exitcode=code,
                              rank=r.rank)
                    dead.append((code is None or code >= 0, f"{w.name(r)} {describe_exit(code)}",
                                 w))
        if dead and (self.executor is None or self.liveness is None):
            raise WorkerDied("; ".join(text for _, text, _ in sorted(dead, key=lambda d: d[:2])))
        for _, text, w in dead:
            self.lose(w, text)
        msgs = receive(self.inbox, 0) if self.inbox in events else []
        report = drops_report(self.inbox, "conductor")
        if report is not None:
            send(self.to_api, report)
        return msgs

    def ranks(self) -> list[tuple[WorkerHandle, RankProcess]]:
        return [(w, r) for w in self.workers for r in w.ranks]

    def wait_for_setup(self) -> bool:
        """Wait for every worker's SETUP_DONE; False if asked to shut down meanwhile."""
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while any(r.setup is None for _, r in self.ranks()):
            left = deadline - time.monotonic()
            if left <= 0:
                waiting = [w.name(r) for w, r in self.ranks() if r.setup is None]
                raise WorkerDied(f"{', '.join(waiting)} not ready after startup_timeout_s="
                                 f"{self.settings.startup_timeout_s}")
            for msg in self.poll(int(min(left, POLL_MS / 1000) * 1000) + 1):
                if isinstance(msg, m.Shutdown):
                    return False
                if isinstance(msg, m.SetupDone):
                    self.setup_done(msg)
                elif isinstance(msg, m.Join):
                    self.join(msg)
        self.check_fingerprints()
        first = self.workers[0].ranks[0].setup
        send(self.to_api, m.Ready(
            model_name=first.model_name, max_model_len=first.max_model_len,
            num_workers=len(self.workers), worker_pids=[r.pid for _, r in self.ranks()],
            worker_addresses=[w.address for w in self.workers]))
        log.info("workers_ready", num_workers=len(self.workers), model=first.model_name,
                 tensor_parallel_size=self.settings.tensor_parallel_size,
                 fingerprint=self.settings.fingerprint())
        return True

    def setup_done(self, msg: m.SetupDone) -> None:
        """Record a rank's readiness (the inbox checked that its replica and rank exist)."""
        self.workers[msg.worker].ranks[msg.rank].setup = msg

    def join(self, msg: m.Join) -> None:
        """A replica on another host asks for the settings: it runs with the conductor's (the
        inbox checked that it is one of the MSTAR_REMOTE_WORKERS replicas)."""
        w = self.workers[msg.worker]
        if w.channel is None:
            try:
                w.channel = push_socket(self.ctx, msg.address, self.security)
            except zmq.ZMQError as exc:
                log.warning("join_refused", worker=msg.worker, address=msg.address,
                            reason=f"not an address zmq can connect to: {exc}")
                return
            w.address = msg.address
            log.info("remote_worker_joined", worker=w.index, address=msg.address, pid=msg.pid,
                     same_settings=msg.fingerprint == self.settings.fingerprint())
        send(w.channel, m.SettingsSync(settings_to_json(self.settings)))

    def check_fingerprints(self) -> None:
        """Every rank of every replica must run with exactly the conductor's settings."""
        expected = self.settings.fingerprint()
        for w, r in self.ranks():
            if r.setup.fingerprint != expected:
                raise WorkerDied(
                    f"{w.name(r)} runs with settings fingerprint {r.setup.fingerprint}, "
                    f"the conductor with {expected}: refusing to start")

    def lose(self, w: WorkerHandle, reason: str) -> None:
        """A replica whose rank died (under Ray): down for good, its other ranks ended."""
        self.liveness.lose(w.index, reason)
        for r in w.ranks:
            if r.process.is_alive():
                r.process.kill()

    def control_loop(self) -> int:
        liveness = self.liveness = RemoteLiveness(
            self.bounds.remote, self.settings.liveness_interval_s, time.monotonic())
        while True:
            for msg in self.poll(POLL_MS):
                if isinstance(msg, m.ReloadSettings):
                    self.reload(msg, liveness.down)
                elif isinstance(msg, m.Alive):
                    liveness.heard(msg, time.monotonic())
                elif isinstance(msg, m.Shutdown):
                    log.info("conductor_stopping", reason=msg.reason)
                    return 0
            self.report_liveness(liveness)

    def report_liveness(self, liveness: RemoteLiveness) -> None:
        report = liveness.update(time.monotonic(),
                                 lambda i: self.workers[i].name(self.workers[i].ranks[0]))
        if report is not None:
            log.warning("replicas_down" if report.down else "replicas_up", down=report.down)
            send(self.to_api, report)

    def reload(self, msg: m.ReloadSettings, down: dict[int, str]) -> None:
        """SIGHUP: take the reloadable knobs, then pass them on to every worker that is up (a
        down one's queue would fill, and then block the conductor)."""
        self.settings = apply_reloaded(self.settings, msg, "conductor")
        for w in self.workers:
            if w.index not in down:
                send(w.channel, msg)

    def stop_workers(self) -> None:
        """Ask live workers to stop, then make sure they are gone."""
        for w in self.workers:
            if w.channel is not None and (w.remote or w.ranks[0].process.is_alive()):
                send(w.channel, m.Shutdown("conductor stopping"))
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for w, r in self.ranks():
            if r.process is None:
                continue
            r.process.join(max(0.0, deadline - time.monotonic()))
            if r.process.is_alive():
                log.warning("worker_killed", worker=w.index, pid=r.process.pid, rank=r.rank)
                r.process.kill()
                r.process.join(5)
        if self.executor is not None:
            self.executor.stop()
