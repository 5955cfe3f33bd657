"""The settings as records: what ``mstar config show --json`` prints and ``GET /v1/config`` returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.sources import LoadedSettings, display_value


def knob_record(knob: Knob, loaded: LoadedSettings,
                pending: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One knob: its running value and source, its schema, and a value waiting for a restart."""
    waiting = (pending or {}).get(knob.env)
    return {
        "name": knob.env,
        "value": display_value(knob, getattr(loaded.settings, knob.name)),
        "default": display_value(knob, knob.default),
        "source": str(loaded.sources[knob.name]),
        "unit": knob.unit,
        "min": knob.minimum,
        "max": knob.maximum,
        "min_exclusive": knob.min_exclusive,
        "choices": list(knob.choices) if knob.choices else None,
        "category": knob.category,
        "description": knob.description,
        "reloadable": knob.reloadable,
        "no_effect": knob.no_effect,
        "pending_restart": waiting,
    }


def settings_records(loaded: LoadedSettings,
                     pending: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every knob's record, in schema order. ``pending``: env name -> {"value", "source"}."""
    return [knob_record(k, loaded, pending) for k in KNOBS]
