"""How processes talk: sockets, CURVE, frame limits."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, SecretStr

from mstar.settings.knobs.field import MAX_WAIT_S, _transport


class TransportKnobs(BaseModel):
    zmq_transport: Literal["ipc", "tcp"] = _transport(
        "ipc", "How processes talk: ipc sockets in MSTAR_SOCKET_DIR, or tcp.")
    zmq_tcp_host: str = _transport("127.0.0.1", "Host for tcp transport.")
    zmq_tcp_base_port: int = _transport(
        29500, "First port for tcp transport; each socket takes the next one.", ge=1024, le=65000)
    dist_master_addr: str = _transport(
        "127.0.0.1", "Address of the torch.distributed rendezvous of a tensor-parallel group "
        "(rank 0's host; every rank must reach it).")
    dist_master_port: int = _transport(
        0, "Port of the rendezvous of replica 0; replica i uses this + i. 0 = a free port picked "
        "at start (one host only).", ge=0, le=65535)
    remote_workers: int = _transport(
        0, "How many of the MSTAR_NUM_WORKERS replicas join from other hosts (`mstar worker "
        "--conductor tcp://HOST:PORT --replica I`) instead of being started by the conductor: "
        "the last ones. Needs the tcp transport (MSTAR_ZMQ_TRANSPORT=tcp).", ge=0, le=256)
    distributed_executor: Literal["mp", "ray"] = _transport(
        "mp", "What starts the replicas' worker processes: mp = the conductor's own child "
        "processes on this host; ray = Ray actors, one placement group per replica, on the Ray "
        "cluster at MSTAR_RAY_ADDRESS (needs `pip install 'mstar[ray]'` and "
        "MSTAR_ZMQ_TRANSPORT=tcp). See docs/distributed.rst.")
    ray_address: str = _transport(
        "auto", "The Ray cluster MSTAR_DISTRIBUTED_EXECUTOR=ray runs on: auto = the running "
        "cluster this host belongs to (`ray start` was run here), local = a Ray instance of "
        "this server's own, or a cluster address (HOST:PORT of the head's GCS, or "
        "ray://HOST:10001).", min_length=1)
    ray_placement: Literal["pack", "spread"] = _transport(
        "pack", "How MSTAR_DISTRIBUTED_EXECUTOR=ray places a tensor-parallel group's ranks: "
        "pack = all on one node (Ray's STRICT_PACK), spread = across nodes where Ray can "
        "(SPREAD; their torch.distributed traffic then crosses the network, unencrypted).")
    socket_dir: Path | None = _transport(
        None, "Directory for ipc sockets. Unset = a fresh private directory per instance.")
    cluster_secret: SecretStr | None = _transport(
        None, "The secret every process of the cluster holds: over tcp, the ZeroMQ CURVE keys "
        "that encrypt and authenticate all traffic are derived from it, and a peer without it "
        "cannot connect. Required with MSTAR_REMOTE_WORKERS (the same on every host); unset "
        "with tcp on one host, a random secret is made per instance. Not used by the ipc "
        "transport. A security setting: any problem with it is an error.",
        secret=True, security=True)
    max_message_mb: float = _transport(
        64.0, "Largest message between processes. A larger frame is dropped (and counted) by its "
        "receiver, and a larger message is never sent: the request that would need it fails.",
        unit="MiB", gt=0.0, le=2047.0)
    liveness_interval_s: float = _transport(
        10.0, "How long the conductor waits to hear from a replica on another host "
        "(MSTAR_REMOTE_WORKERS) before it counts it down: a down replica gets no new requests, "
        "its requests in flight fail with 503 naming it, and /health reports the server "
        "degraded until it is heard again. Its `mstar worker` sends a heartbeat every quarter "
        "of this. Replicas the conductor starts itself are watched through their processes.",
        unit="s", ge=0.5, le=MAX_WAIT_S)
