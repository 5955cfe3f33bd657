"""A reload (SIGHUP): which knobs changed, which of them apply now, and the settings that then run.

The new values are built by ``sources.reload_settings`` with the same rules as at start. Only
reloadable knobs (``reloadable.RELOADABLE``) change in the running settings; every other change
waits for a restart and is reported as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.schema import WorkerSettings
from mstar.settings.sources import LoadedSettings, display_value
from mstar.settings.wire import withheld


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
                           {k.name: getattr(fresh.settings, k.name) for k in applied})
    sources = {**running.sources, **{k.name: fresh.sources[k.name] for k in applied}}
    new_running = LoadedSettings(settings, sources, fresh.problems, fresh.notices, running.inputs)
    return ReloadPlan(new_running,
                      tuple(_change(k, running, fresh) for k in applied),
                      tuple(_change(k, running, fresh) for k in changed if not k.reloadable))


def reloadable_values(settings: WorkerSettings) -> dict[str, Any]:
    """The reloadable knobs as plain values, to send to another process (secrets withheld:
    only whether one is set travels, which keeps the fingerprint)."""
    return {name: withheld(name, getattr(settings, name))
            for name in sorted(k.name for k in KNOBS if k.reloadable)}


def with_values(settings: WorkerSettings, values: Mapping[str, Any]) -> WorkerSettings:
    """New frozen settings: ``settings`` with ``values`` replaced (validated like any other)."""
    current = {name: getattr(settings, name) for name in type(settings).model_fields}
    return WorkerSettings(**{**current, **values})
