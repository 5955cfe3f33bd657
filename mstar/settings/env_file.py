"""Reading ``KEY=value`` env files, with file:line for every entry and every problem."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        inner = value[1:-1]
        return inner.replace('\\"', '"').replace("\\n", "\n") if value[0] == '"' else inner
    # An unquoted value ends at an inline comment.
    hash_at = value.find(" #")
    return (value[:hash_at] if hash_at >= 0 else value).strip()


def read_env_file(path: Path) -> tuple[list[Entry], list[SyntaxProblem]]:
    """Parse one env file. Bad lines are reported and skipped; the rest of the file still applies.

    Handles comments, blank lines, an ``export`` prefix and single or double quotes. A key given
    twice is reported and the later line wins, as it would in a shell.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsUsageError(f"env file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsUsageError(f"cannot read env file {path}: {exc}") from None
    entries: dict[str, Entry] = {}
    problems: list[SyntaxProblem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        location = f"{path}:{number}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip()
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(SyntaxProblem(location, "line is not KEY=value; ignored"))
            continue
        if key in entries:
            problems.append(SyntaxProblem(
                location, f"{key} is already set at {entries[key].location}; this line wins"))
            del entries[key]
        entries[key] = Entry(key, _unquote(value.strip()), location)
    return list(entries.values()), problems
