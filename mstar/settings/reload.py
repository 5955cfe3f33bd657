"""A reload (SIGHUP): which knobs changed, which of them apply now, and the settings that then run.

The new values are built by ``sources.reload_settings`` with the same rules as at start. Only
reloadable knobs (``reloadable.RELOADABLE``) change in the running settings; every other change
waits for a restart and is reported as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.schema import WorkerSettings
from mstar.settings.sources import LoadedSettings, display_value
from mstar.settings.wire import withheld

KEYS_DIGEST = "api_keys_digest"  # WorkerSettings' one field that is not a knob
KEYS_CONTENT = "MSTAR_API_KEYS_FILE (content)"  # how a changed keys file shows in the reload log


@dataclass(frozen=True)
class Change:
    """One knob whose configured value differs from the running one (values as shown)."""

    env: str
    old: Any
    new: Any
    old_source: str
    new_source: str
    reloadable: bool

    def as_dict(self) -> dict[str, Any]:
        return {"from": self.old, "to": self.new, "source": self.new_source}


@dataclass(frozen=True)
class ReloadPlan:
    running: LoadedSettings  # what runs after the reload: the reloadable changes applied
    applied: tuple[Change, ...]
    needs_restart: tuple[Change, ...]


def is_strict(loaded: LoadedSettings) -> bool:
    """Whether problems are errors for these settings (--strict or MSTAR_CONFIG_STRICTNESS)."""
    if loaded.inputs.strict is not None:
        return loaded.inputs.strict
    return loaded.settings.config_strictness == "strict"


def _change(knob: Knob, running: LoadedSettings, fresh: LoadedSettings) -> Change:
    return Change(knob.env, display_value(knob, getattr(running.settings, knob.name)),
                  display_value(knob, getattr(fresh.settings, knob.name)),
                  str(running.sources[knob.name]), str(fresh.sources[knob.name]), knob.reloadable)


def plan_reload(running: LoadedSettings, fresh: LoadedSettings) -> ReloadPlan:
    """Compare the running settings with freshly loaded ones; apply only the reloadable changes."""
    changed = [k for k in KNOBS
               if getattr(running.settings, k.name) != getattr(fresh.settings, k.name)]
    applied = [k for k in changed if k.reloadable]
    settings = with_values(running.settings,
                           {**{k.name: getattr(fresh.settings, k.name) for k in applied},
                            KEYS_DIGEST: fresh.settings.api_keys_digest})
    sources = {**running.sources, **{k.name: fresh.sources[k.name] for k in applied}}
    new_running = LoadedSettings(settings, sources, fresh.problems, fresh.notices, running.inputs,
                                 fresh.keys)
    changes = [_change(k, running, fresh) for k in applied]
    if running.settings.api_keys_digest != fresh.settings.api_keys_digest:
        changes.append(_keys_change(running, fresh))
    return ReloadPlan(new_running, tuple(changes),
                      tuple(_change(k, running, fresh) for k in changed if not k.reloadable))


def _keys_change(running: LoadedSettings, fresh: LoadedSettings) -> Change:
    """The keys file's content changed (its path may not have): its content hashes, old and new."""
    return Change(KEYS_CONTENT, running.settings.api_keys_digest, fresh.settings.api_keys_digest,
                  str(running.sources["api_keys_file"]), str(fresh.sources["api_keys_file"]),
                  True)


def reloadable_values(settings: WorkerSettings) -> dict[str, Any]:
    """The reloadable knobs as plain values, to send to another process (secrets withheld:
    only whether one is set travels, which keeps the fingerprint)."""
    values = {name: _plain(withheld(name, getattr(settings, name)))
              for name in sorted(k.name for k in KNOBS if k.reloadable)}
    return {**values, KEYS_DIGEST: settings.api_keys_digest}  # the fingerprint covers it


def _plain(value: Any) -> Any:
    """A value a message can carry (a path as its text; the receiver validates it back)."""
    return str(value) if isinstance(value, Path) else value


def with_values(settings: WorkerSettings, values: Mapping[str, Any]) -> WorkerSettings:
    """New frozen settings: ``settings`` with ``values`` replaced (validated like any other)."""
    current = {name: getattr(settings, name) for name in type(settings).model_fields}
    return WorkerSettings(**{**current, **values})
