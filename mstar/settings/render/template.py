"""A commented ``.env.example`` with every knob at its default (``mstar config template``)."""

from __future__ import annotations

import textwrap

from mstar.settings.catalog import KNOBS, Knob
from mstar.settings.render.docs import bounds_text, describe, portable

_HEADER = """\
# mstar settings: every MSTAR_* knob, commented out at its default.
# Generated from mstar/settings/schema.py by `mstar config template`; do not edit the copy in docs/.
# Uncomment a line to set it; use with `mstar serve --env-file FILE` (see `mstar config validate`).
# Knobs marked "reloadable" are applied by a running server on SIGHUP; the rest need a restart.
"""


def _value(knob: Knob) -> str:
    value = portable(knob.default)
    if value is None or knob.no_effect:  # left blank: uncommenting it changes nothing
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def knob_facts(knob: Knob) -> str:
    """Unit, bounds, reloadability and an unset default, as one parenthesis-ready line."""
    facts = [f"unit: {knob.unit}"] if knob.unit else []
    if limits := bounds_text(knob):
        facts.append(f"allowed: {limits}")
    facts.append("reloadable" if knob.reloadable else "restart to change")
    if knob.default is None:
        facts.append("unset by default")
    return "; ".join(facts)


def _entry(knob: Knob) -> str:
    lines = textwrap.wrap(describe(knob), 96, break_on_hyphens=False)
    lines.append(f"({knob_facts(knob)})")
    return "".join(f"# {line}\n" for line in lines) + f"# {knob.env}={_value(knob)}\n"


def render_template() -> str:
    parts = [_HEADER]
    category = None
    for knob in KNOBS:
        if knob.category != category:
            category = knob.category
            parts.append(f"\n# ==== {category} ====\n")
        parts.append("\n" + _entry(knob))
    return "".join(parts)
