"""Socket addresses of one serving instance.

IPC sockets live in a private directory per instance (``tempfile.mkdtemp``, under
``settings.socket_dir`` when set), so two instances on one machine never collide. The endpoints
carry the instance's ``SocketSecurity`` (CURVE keys over tcp) to every process.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mstar.ipc.security import SocketSecurity, instance_security

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings


@dataclass(frozen=True)
class Endpoints:
    conductor: str  # conductor PULL: control from the API server, reports from workers
    api: str  # API server PULL: token outputs and stats from workers, control from the conductor
    workers: tuple[str, ...]  # worker i PULL: requests from the API server, control from the conductor
    security: SocketSecurity  # what every socket applies (keys, frame limit)
    socket_dir: Path | None = None  # removed by whoever outlives the others


def create_socket_dir(settings: WorkerSettings) -> Path | None:
    """A fresh private directory for IPC sockets; None for tcp transport."""
    if settings.zmq_transport != "ipc":
        return None
    parent = settings.socket_dir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="mstar-", dir=parent))


def make_endpoints(settings: WorkerSettings, socket_dir: Path | None) -> Endpoints:
    """The instance's endpoints; MissingClusterSecret (a ValueError) when tcp needs a secret."""
    n = settings.num_workers
    security = instance_security(settings)
    if settings.zmq_transport == "tcp":
        host, base = settings.zmq_tcp_host, settings.zmq_tcp_base_port
        return Endpoints(
            conductor=f"tcp://{host}:{base}",
            api=f"tcp://{host}:{base + 1}",
            workers=tuple(f"tcp://{host}:{base + 2 + i}" for i in range(n)),
            security=security,
        )
    if socket_dir is None:
        raise ValueError("socket_dir is required for ipc transport")
    return Endpoints(
        conductor=f"ipc://{socket_dir}/conductor",
        api=f"ipc://{socket_dir}/api",
        workers=tuple(f"ipc://{socket_dir}/worker{i}" for i in range(n)),
        security=security,
        socket_dir=socket_dir,
    )


def remote_endpoints(conductor: str, replica: int, own_address: str,
                     security: SocketSecurity) -> Endpoints:
    """The endpoints of a replica on another host: the conductor's address as given, the API
    server's next to it (the tcp layout of ``make_endpoints``), its own command socket."""
    host, port = conductor.removeprefix("tcp://").rsplit(":", 1)
    workers = ("",) * replica + (own_address,)
    return Endpoints(conductor=conductor, api=f"tcp://{host}:{int(port) + 1}", workers=workers,
                     security=security)
