"""The API keys file (MSTAR_API_KEYS_FILE): its typed schema, and reading it with errors that name
the file and the line.

A key is stored only as ``sha256:<64 hex digits>`` of the key's text (``mstar keys hash`` prints
it); the clear key never is. ``None`` for a limit means unlimited. The table is frozen: a reload
builds a new one (``load_settings`` reads the file, so ``mstar config validate``, start-up and
SIGHUP apply the same rules).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mstar.settings.env_file import SettingsUsageError
from mstar.settings.knobs.field import MAX_COUNT

HASH_PREFIX = "sha256:"
PRIORITIES = ("low", "normal", "high")  # lowest first: a class's rank is its index
Scope = Literal["inference", "admin"]
Priority = Literal["low", "normal", "high"]


def key_hash(key: str) -> str:
    """How a key is stored in the file: ``sha256:`` and the hex digest of its UTF-8 text."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


class ApiKey(BaseModel):
    """One ``[[keys]]`` table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$",
                      description="Shown in logs and metrics (never the key).")
    hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$",
                      description="'sha256:' + the hex SHA-256 of the key (mstar keys hash).")
    scopes: tuple[Scope, ...] = Field(("inference",), min_length=1)
    requests_per_minute: int | None = Field(None, ge=1, le=MAX_COUNT)
    tokens_per_minute: int | None = Field(None, ge=1, le=MAX_COUNT)
    max_concurrent: int | None = Field(None, ge=1, le=MAX_COUNT)
    priority: Priority = "normal"
    models: tuple[str, ...] | None = Field(None, min_length=1)

    @property
    def rank(self) -> int:
        """The priority class as the scheduler orders it (higher first)."""
        return PRIORITIES.index(self.priority)


class KeysFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    keys: tuple[ApiKey, ...] = Field(min_length=1)


class KeyTable(BaseModel):
    """The keys in force and the hash of the file's content (the settings fingerprint's part)."""

    model_config = ConfigDict(frozen=True)

    path: Path
    keys: tuple[ApiKey, ...]
    digest: str


class KeysFileError(SettingsUsageError):
    """The keys file cannot be used; the message names the file and, where known, the line."""

    def __init__(self, message: str) -> None:
        super().__init__(f"MSTAR_API_KEYS_FILE: {message}")


def read_keys_file(path: Path) -> KeyTable:
    """Read and validate the keys file; ``KeysFileError`` says where it is wrong."""
    try:
        raw = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise KeysFileError(f"{path}: cannot be read: {reason}") from None
    try:
        text = raw.decode()
        data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise KeysFileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise KeysFileError(f"{path}: {_toml_error(exc)}") from None
    try:
        parsed = KeysFile.model_validate(data)
    except ValidationError as exc:
        raise KeysFileError("\n".join(_located(path, text, e) for e in _causes(exc))) from None
    _check_unique(path, text, parsed.keys)
    return KeyTable(path=path, keys=parsed.keys,
                    digest=HASH_PREFIX + hashlib.sha256(raw).hexdigest())


def _check_unique(path: Path, text: str, keys: tuple[ApiKey, ...]) -> None:
    """Names (the metrics' labels) and hashes (which key a request presents) are unique."""
    for field in ("name", "hash"):
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            value = getattr(key, field)
            if value in first:
                line = _line_of(text, ["keys", i, field])
                raise KeysFileError(f"{path}:{line}: keys[{i}].{field}: the same {field} as "
                                    f"keys[{first[value]}]")
            first[value] = i


def _causes(exc: ValidationError) -> list[dict]:
    """The errors that are not consequences of another (pydantic also reports a tuple that lost
    its invalid items as too short, at every level above)."""
    errors = exc.errors()
    locs = [tuple(e["loc"]) for e in errors]
    return [e for e, loc in zip(errors, locs, strict=True)
            if not any(other[: len(loc)] == loc and len(other) > len(loc) for other in locs)]


def _toml_error(exc: tomllib.TOMLDecodeError) -> str:
    """tomllib's message as 'line N: ...' (it ends in '(at line N, column M)')."""
    match = re.search(r"\(at line (\d+), column \d+\)$", str(exc))
    if match is None:
        return str(exc)
    return f"line {match[1]}: {str(exc)[: match.start()].strip()}"


def _located(path: Path, text: str, error: dict) -> str:
    """One validation error as 'file:line: keys[i].field: message'."""
    loc = [part for part in error["loc"] if part not in ("tuple[str, ...]",)]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    line = _line_of(text, loc)
    prefix = f"{path}:{line}" if line else str(path)
    return f"{prefix}: {where or 'keys'}: {error['msg']}"


def _line_of(text: str, loc: list) -> int | None:
    """The line of ``keys[i].field`` (or of table i, or of the field's first mention)."""
    lines = text.splitlines()
    tables = [n for n, line in enumerate(lines, 1) if re.match(r"\s*\[\[\s*keys\s*\]\]", line)]
    if len(loc) < 2 or not isinstance(loc[1], int) or loc[1] >= len(tables):
        return tables[0] if tables else None
    start = tables[loc[1]]
    end = tables[loc[1] + 1] if loc[1] + 1 < len(tables) else len(lines) + 1
    if len(loc) >= 3:
        for n in range(start, end):
            if re.match(rf"\s*{re.escape(str(loc[2]))}\s*=", lines[n - 1]):
                return n
    return start
