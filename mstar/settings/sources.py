"""Building the settings once: sources, precedence, provenance and problems.

Precedence, lowest first: defaults < env files (in the order given) < process environment < CLI flags <
overrides passed in code (``LLM(max_num_seqs=8)``). Every effective value records where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mstar.settings.catalog import BY_ENV, BY_NAME, KNOBS, Knob
from mstar.settings.env_file import SettingsUsageError, SyntaxProblem, read_env_file
from mstar.settings.keys_file import KeyTable, read_keys_file
from mstar.settings.names import classify_unknown
from mstar.settings.parse import UNSET, Rejected, coerce, shown_text
from mstar.settings.schema import WorkerSettings

ENVIRONMENT = "environment"
COMMAND_LINE = "command line"
OVERRIDE = "code"
DEFAULT = "default"
MASK = "********"


@dataclass(frozen=True)
class Source:
    """Where an effective value came from; ``rejected`` holds a raw value that was not used as is."""

    origin: str
    rejected: str | None = None
    adjustment: str | None = None  # "fallback" or "clamped"

    def __str__(self) -> str:
        if self.adjustment == "fallback":
            return f"fallback (rejected {self.rejected!r} from {self.origin})"
        if self.adjustment == "clamped":
            return f"{self.origin} (clamped from {self.rejected!r})"
        return self.origin


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration: a warning, or an error in strict mode.

    ``error`` marks a problem that is an error in every mode (one touching a security knob);
    ``stale`` one that is a warning in every mode (a knob that no longer has an effect is set, so
    that existing env files keep working).
    """

    variable: str
    reason: str
    location: str
    value: str | None = None
    used: Any = None
    error: bool = False
    stale: bool = False  # a knob with no effect was set: a warning even in strict mode

    def message(self) -> str:
        if self.value is None:
            return f"{self.location}: {self.variable}: {self.reason}"
        if self.error:  # nothing is used: the command stops
            return f"{self.location}: {self.variable}={self.value!r} {self.reason}"
        return (f"{self.location}: {self.variable}={self.value!r} {self.reason}; "
                f"using {self.used!r}")


class SettingsError(Exception):
    """Strict mode found problems, or a security knob has one; all problems are listed."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = tuple(problems)
        lines = "\n".join("  " + p.message() for p in self.problems)
        super().__init__(f"{len(self.problems)} configuration problem(s):\n{lines}")


@dataclass(frozen=True)
class SettingsInputs:
    """What the settings were built from, so that a reload (SIGHUP) can build them again: the env
    files are re-read; the process environment is the snapshot taken at start (it cannot change)."""

    env_files: tuple[Path, ...] = ()
    environ: Mapping[str, str] = field(default_factory=dict)
    cli: Mapping[str, Any] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    strict: bool | None = None


@dataclass(frozen=True)
class LoadedSettings:
    settings: WorkerSettings
    sources: Mapping[str, Source]
    problems: tuple[Problem, ...]
    notices: tuple[str, ...] = field(default=())
    inputs: SettingsInputs = field(default_factory=SettingsInputs)
    keys: KeyTable | None = None  # MSTAR_API_KEYS_FILE's keys, read with the settings

    def changed(self) -> list[tuple[str, Any, Source]]:
        """(env name, value, source) of every knob whose value differs from its default."""
        return [(k.env, display_value(k, getattr(self.settings, k.name)), self.sources[k.name])
                for k in KNOBS if getattr(self.settings, k.name) != k.default]


def display_value(knob: Knob, value: Any) -> Any:
    if knob.secret and value is not None:
        return MASK
    if isinstance(value, Path):
        return str(value)
    return value


def _unknown(name: str, location: str) -> Problem | None:
    unknown = classify_unknown(name)
    if unknown is None:
        return None
    return Problem(ascii(name)[1:-1], unknown.reason, location, error=unknown.error)


def _syntax(problem: SyntaxProblem) -> Problem:
    """An env-file line that was not used; an error if it may have been meant for a security knob."""
    meant = classify_unknown(problem.key or "")
    if meant is not None and meant.error:
        return Problem(meant.meant.env, f"{problem.reason}; {meant.meant.env} is a security "
                       "setting, so this is an error", problem.location, error=True)
    return Problem("env file", problem.reason, problem.location)


# Variables of other tools that mean a knob (read here, so no other module reads the
# environment): Hugging Face's, for hub ids. The MSTAR_* name of the knob wins over them.
FOREIGN_ENV = {"HF_TOKEN": "hf_token", "HF_HOME": "hf_home", "HF_HUB_OFFLINE": "hf_hub_offline",
               "HF_ENDPOINT": "hf_endpoint"}


def _layers(env_files: Iterable[Path], environ: Mapping[str, str], cli: Mapping[str, Any],
            overrides: Mapping[str, Any], problems: list[Problem]):
    """Yield (knob, raw value, origin) in precedence order, reporting unknown names."""
    for path in env_files:
        entries, syntax = read_env_file(Path(path))
        problems.extend(_syntax(s) for s in syntax)
        for entry in entries:
            if entry.key in BY_ENV:
                yield BY_ENV[entry.key], entry.value, entry.location
            elif problem := _unknown(entry.key, entry.location):
                problems.append(problem)
    for key, value in sorted(environ.items()):  # HF_* sort before MSTAR_*, which win
        if key in FOREIGN_ENV:
            yield BY_NAME[FOREIGN_ENV[key]], value, key
        elif key in BY_ENV:
            yield BY_ENV[key], value, ENVIRONMENT
        elif problem := _unknown(key, ENVIRONMENT):
            problems.append(problem)
    for origin, values in ((COMMAND_LINE, cli), (OVERRIDE, overrides)):
        for name, value in values.items():
            if name not in BY_NAME:
                raise SettingsUsageError(f"unknown setting {name!r}")
            yield BY_NAME[name], value, origin


def load_settings(overrides: Mapping[str, Any] | None = None, env_files: Iterable[Path] = (),
                  strict: bool | None = None, environ: Mapping[str, str] | None = None,
                  cli: Mapping[str, Any] | None = None) -> LoadedSettings:
    """Build the frozen settings from every source, once, before anything heavy starts.

    Problems warn and fall back; with ``strict`` (or MSTAR_CONFIG_STRICTNESS=strict) they raise
    ``SettingsError`` listing all of them, as does any problem with a security knob. Nothing is
    logged or configured here: the entry point reports the result.
    """
    environ = dict(os.environ if environ is None else environ)
    inputs = SettingsInputs(tuple(Path(p) for p in env_files), environ, dict(cli or {}),
                            dict(overrides or {}), strict)
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    sources = {k.name: Source(DEFAULT) for k in KNOBS}
    for knob, raw, origin in _layers(inputs.env_files, environ, inputs.cli, inputs.overrides,
                                     problems):
        shown = shown_text(knob, raw, MASK)
        try:
            value, reason = coerce(knob, raw)
        except Rejected as exc:
            used = values.get(knob.name, knob.default)
            problems.append(Problem(knob.env, str(exc), origin, shown, display_value(knob, used),
                                    error=knob.security))
            sources[knob.name] = Source(origin, shown, "fallback")
            continue
        if value is UNSET:
            continue
        values[knob.name] = value
        sources[knob.name] = Source(origin, shown, "clamped") if reason else Source(origin)
        if knob.no_effect:
            problems.append(Problem(knob.env, f"has no effect since {knob.no_effect}", origin,
                                    stale=True))
        if reason:
            problems.append(Problem(knob.env, reason, origin, shown, display_value(knob, value),
                                    error=knob.security))
    settings = WorkerSettings(**values)
    if strict is None:
        strict = settings.config_strictness == "strict"
    if any(p.error or (strict and not p.stale) for p in problems):
        raise SettingsError(problems)
    keys = None
    if settings.api_keys_file is not None:  # fails closed: KeysFileError names file and line
        keys = read_keys_file(settings.api_keys_file)
        settings = settings.model_copy(update={"api_keys_digest": keys.digest})
    return LoadedSettings(settings, sources, tuple(problems), _notices(settings), inputs, keys)


def reload_settings(inputs: SettingsInputs, strict: bool) -> LoadedSettings:
    """Build the settings again from the same inputs (env files re-read), same rules."""
    return load_settings(overrides=inputs.overrides, env_files=inputs.env_files, strict=strict,
                         environ=inputs.environ, cli=inputs.cli)


def _notices(settings: WorkerSettings) -> tuple[str, ...]:
    """Valid but noteworthy choices, said once at startup."""
    notices = []
    if settings.max_consecutive_spec_steps == 0:
        notices.append("MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=0: speculative scheduling (the overlapped "
                       "next step) is off; "
                       "the engine runs a serial loop")
    return tuple(notices)
