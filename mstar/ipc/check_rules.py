"""The rules the inbox checks (``mstar.ipc.inbox_checks``) apply to a message's values: one
function per kind of value, each raising ``Invalid`` with the field's name."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

MAX_ID_CHARS = 256  # a request id (the API server makes them: a uuid and a suffix)
MAX_NAME_CHARS = 1024  # a model name, an address, a fingerprint, a field name, a process name
MAX_TEXT_CHARS = 1 << 16  # an error message or a reason: shown to clients and logged


class Invalid(ValueError):
    """A decoded message whose values do not fit this instance; the text names the field."""


def text(value: str, field: str, limit: int = MAX_NAME_CHARS) -> None:
    if len(value) > limit:
        raise Invalid(f"{field} has {len(value)} characters; the most is {limit}")


def member(value: int, allowed: range | Iterable[Any], field: str) -> None:
    if value not in allowed:
        raise Invalid(f"{field}={value!r} is not in {allowed!r}")


def count(value: int, field: str) -> None:
    if value < 0:
        raise Invalid(f"{field}={value} is negative")


def amount(value: float, field: str, limit: float = math.inf) -> None:
    if not (math.isfinite(value) and 0 <= value <= limit):
        raise Invalid(f"{field}={value!r} is not a finite number in [0, {limit:g}]")


def token_ids(ids: list[int], below: int, field: str) -> None:
    """Token ids: each in [0, below)."""
    if ids and (min(ids) < 0 or max(ids) >= below):
        raise Invalid(f"{field} has token ids outside [0, {below}): "
                      f"{[t for t in ids if not 0 <= t < below][:5]}")


def most(items: Any, limit: int, field: str) -> None:
    if len(items) > limit:
        raise Invalid(f"{field} has {len(items)} entries; the most is {limit}")


def address(value: str, field: str, schemes: tuple[str, ...] = ("tcp://",)) -> None:
    """An address zmq can connect to: tcp://HOST:PORT (or ipc://PATH where allowed)."""
    text(value, field)
    if value.startswith("ipc://") and "ipc://" in schemes and len(value) > len("ipc://"):
        return
    host, _, port = value.removeprefix("tcp://").rpartition(":")
    if not (value.startswith("tcp://") and "tcp://" in schemes and host and port.isdigit()
            and 0 < int(port) < 65536):
        raise Invalid(f"{field}={value!r} is not an address of the form "
                      f"{' or '.join(s + '...' for s in schemes)} (tcp://HOST:PORT)")
