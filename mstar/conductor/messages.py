"""Messages between the API server, the conductor and the workers.

Each message is a small dataclass sent as msgpack ``[type name, fields]`` over zmq PUSH/PULL sockets.
Control (placement, aborts, liveness) goes through the conductor; token outputs go from a worker
straight to the API server so the conductor never sits on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import msgpack

_TYPES: dict[str, type] = {}


def _message(cls: type) -> type:
    cls = dataclass(cls)
    _TYPES[cls.__name__] = cls
    return cls


def encode(msg: Any) -> bytes:
    body = {f.name: getattr(msg, f.name) for f in fields(msg)}
    return msgpack.packb([type(msg).__name__, body], use_bin_type=True)


def decode(data: bytes) -> Any:
    name, body = msgpack.unpackb(data, raw=False)
    return _TYPES[name](**body)


# API server -> conductor -> worker
@_message
class AddRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: dict


@_message
class AbortRequests:
    request_ids: list[str]


@_message
class Shutdown:
    reason: str = ""


# worker -> conductor
@_message
class SetupDone:
    worker: int
    pid: int
    fingerprint: str
    model_name: str
    max_model_len: int
    seconds: float


@_message
class RequestsDone:
    """Requests a worker no longer holds (finished, aborted or rejected): load accounting."""

    worker: int
    request_ids: list[str]


# worker -> API server
@_message
class Outputs:
    outputs: list[dict]


@_message
class RequestFailed:
    request_id: str
    status: int
    message: str


@_message
class WorkerStats:
    worker: int
    running: int
    waiting: int
    kv_cache_usage: float


# conductor -> API server
@_message
class Ready:
    model_name: str
    max_model_len: int
    num_workers: int
    worker_pids: list[int] = field(default_factory=list)


@_message
class Fatal:
    """The serving stack is going down: every pending request fails with this message."""

    message: str
