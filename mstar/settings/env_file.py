"""Reading ``KEY=value`` env files, with file:line for every entry and every problem.

Lines are parsed by python-dotenv's parser (the library pydantic-settings uses), so quoting,
escapes, ``export`` and inline comments mean what they mean there; ``${VAR}`` is not expanded.
Reading is bounded: only regular files of at most ``MAX_ENV_FILE_BYTES`` are read.
"""

from __future__ import annotations

import io
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dotenv.parser import Binding, parse_stream

MAX_ENV_FILE_BYTES = 1024 * 1024
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))
# The key as written before '=', to name it when a line cannot be parsed.
_KEY_BEFORE_EQUALS = re.compile(r"\s*(?:export\s+)?([^=\n]*?)\s*=")


class SettingsUsageError(Exception):
    """The command was asked for something impossible (e.g. a missing env file): exit code 2."""


@dataclass(frozen=True)
class Entry:
    key: str
    value: str
    location: str  # "prod.env:12"


@dataclass(frozen=True)
class SyntaxProblem:
    location: str
    reason: str
    key: str | None = None  # the key the line seems to set, when one can be made out


def _kind(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def read_bounded(path: Path) -> str:
    """The file's text, refusing anything but a regular UTF-8 file of at most 1 MiB.

    The type is checked with stat before opening, so a FIFO is never opened and a device is never
    read; the size limit also holds for a file that grows or is swapped after the check.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SettingsUsageError(f"env file not found: {path}") from None
    except OSError as exc:
        raise SettingsUsageError(f"cannot read env file {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise SettingsUsageError(f"env file {path} is {_kind(info.st_mode)}; "
                                 "only regular files are read")
    too_big = SettingsUsageError(f"env file {path} is larger than {MAX_ENV_FILE_BYTES} bytes "
                                 "(the limit for env files)")
    if info.st_size > MAX_ENV_FILE_BYTES:
        raise too_big
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # swapped since the stat
                raise SettingsUsageError(f"env file {path} is not a regular file")
            data = handle.read(MAX_ENV_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingsUsageError(f"cannot read env file {path}: {exc.strerror}") from None
    if len(data) > MAX_ENV_FILE_BYTES:
        raise too_big
    try:
        return data.decode("utf-8-sig")  # a leading BOM would hide the first key
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SettingsUsageError(f"env file {path}:{line} is not UTF-8 text") from None


def _line_of(binding: Binding) -> int:
    """The line the binding's key is on (dotenv counts from the blank lines before it)."""
    text = binding.original.string
    return binding.original.line + text[:len(text) - len(text.lstrip())].count("\n")


def _unparsable(binding: Binding, location: str) -> SyntaxProblem:
    match = _KEY_BEFORE_EQUALS.match(binding.original.string)
    if match is None:  # the first word stands for the key ('MSTAR_API_KEY sk-1' lacks its '=')
        words = binding.original.string.split()
        key = words[1] if words[:1] == ["export"] and len(words) > 1 else next(iter(words), None)
        return SyntaxProblem(location, "line is not KEY=value; ignored", key)
    key = match.group(1)
    value = binding.original.string[match.end():].strip()
    if re.search(r"\s", key):
        reason = f"key {key!r} contains a space; line ignored"
    elif value[:1] in ("'", '"'):
        reason = "unterminated quote; line ignored"
    else:
        reason = "cannot parse this line; ignored"
    return SyntaxProblem(location, reason, key)


def read_env_file(path: Path) -> tuple[list[Entry], list[SyntaxProblem]]:
    """Parse one env file. Bad lines are reported and skipped; the rest of the file still applies.

    A key given twice is reported and the later line wins, as it would in a shell.
    """
    entries: dict[str, Entry] = {}
    problems: list[SyntaxProblem] = []
    for binding in parse_stream(io.StringIO(read_bounded(path))):
        location = f"{path}:{_line_of(binding)}"
        if binding.error:
            problems.append(_unparsable(binding, location))
            continue
        key = binding.key
        if key is None:  # blank lines and comments
            continue
        if binding.value is None:
            problems.append(SyntaxProblem(location, "line is not KEY=value; ignored", key))
            continue
        if key in entries:
            problems.append(SyntaxProblem(
                location, f"{key} is already set at {entries[key].location}; this line wins", key))
            del entries[key]
        entries[key] = Entry(key, binding.value, location)
    return list(entries.values()), problems
