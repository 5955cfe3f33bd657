"""What every socket of one serving instance applies: ZeroMQ CURVE over tcp, and the frame limit.

Over tcp, every socket speaks CURVE (encrypted, authenticated). Two keypairs are derived from the
cluster secret (``MSTAR_CLUSTER_SECRET``): one for every bound (PULL) socket, one for every
connecting (PUSH) socket. The server public key is never shown anywhere: a peer without the
secret cannot compute it, so its handshake fails and nothing it sends is ever delivered.

When the secret is unset and no replica joins from another host, a random secret is made per
instance; it travels to the children with the endpoints and never leaves the process tree. With
``MSTAR_REMOTE_WORKERS`` > 0 the secret is required: the server refuses to start without it.
The ipc transport needs no keys: its sockets live in a private directory (mode 0700).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zmq
from zmq.utils import z85

if TYPE_CHECKING:
    from mstar.settings import WorkerSettings

_MIB = 1 << 20


@dataclass(frozen=True, repr=False)
class CurveKeys:
    """z85 keys: the server pair (bound sockets) and the client pair (connecting sockets)."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def from_secret(cls, secret: str) -> CurveKeys:
        server, client = _keypair(secret, b"mstar server"), _keypair(secret, b"mstar client")
        return cls(server[0], server[1], client[0], client[1])

    def __repr__(self) -> str:  # never in a log line or a traceback
        return "CurveKeys(<derived from the cluster secret>)"


def _keypair(secret: str, label: bytes) -> tuple[bytes, bytes]:
    """(public, secret) z85 keys, the same on every host that holds ``secret``."""
    key = z85.encode(hmac.new(secret.encode(), label, hashlib.sha256).digest())
    return zmq.curve_public(key), key


@dataclass(frozen=True)
class SocketSecurity:
    """The frame limit every socket enforces, and the CURVE keys (None: ipc transport)."""

    max_message_bytes: int
    keys: CurveKeys | None = None


class MissingClusterSecret(ValueError):
    pass


def instance_security(settings: WorkerSettings) -> SocketSecurity:
    """The security of the instance ``mstar serve`` starts (see the module docstring)."""
    limit = int(settings.max_message_mb * _MIB)
    if settings.zmq_transport != "tcp":
        return SocketSecurity(limit)
    if settings.cluster_secret is not None:
        return SocketSecurity(limit, CurveKeys.from_secret(settings.cluster_secret.get_secret_value()))
    if settings.remote_workers:
        raise MissingClusterSecret(
            f"MSTAR_REMOTE_WORKERS={settings.remote_workers} needs MSTAR_CLUSTER_SECRET (the same "
            "on every host): replicas on other hosts authenticate with it")
    return SocketSecurity(limit, CurveKeys.from_secret(secrets.token_urlsafe(32)))


def joining_security(settings: WorkerSettings) -> SocketSecurity:
    """The security of ``mstar worker``: the cluster secret is required to join."""
    if settings.cluster_secret is None:
        raise MissingClusterSecret("mstar worker needs MSTAR_CLUSTER_SECRET, the same as the "
                                   "serving host's: the conductor accepts no one without it")
    return SocketSecurity(int(settings.max_message_mb * _MIB),
                          CurveKeys.from_secret(settings.cluster_secret.get_secret_value()))
