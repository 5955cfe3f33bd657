"""A JSON Schema of every knob, for linting env files and Helm values in CI (``mstar config schema``).

The document is an object keyed by ``MSTAR_*`` name. Each value may be typed (``8``, ``true``, as in
YAML) or text (``"8"``, as an env file or a Kubernetes ``env`` entry has it). Typed values are checked
against type, bounds and choices; text is checked for the syntax the knob accepts (bounds cannot be
expressed on text: ``mstar config validate --strict`` is the complete check). Blank text means unset.
Unknown ``MSTAR_*`` names are rejected (in any case); other names are left alone.
"""

from __future__ import annotations

import json
from typing import Any

from mstar.settings.catalog import KNOBS, Kind, Knob
from mstar.settings.parse import FALSE_WORDS, FLOAT_RE, INT_RE, SECRET_RE, TRUE_WORDS
from mstar.settings.render.docs import portable
from mstar.settings.schema import ENV_PREFIX

SCHEMA_ID = "https://mstar.invalid/settings.schema.json"


def _any_case(word: str) -> str:
    """A pattern matching ``word`` in any case (ECMA-262 patterns have no portable (?i))."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else _escape(c) for c in word)


def _escape(c: str) -> str:
    return "\\" + c if c in r"\.^$*+?()[]{}|-/" else c


def _text(*alternatives: str) -> dict[str, Any]:
    body = "|".join(f"(?:{a})" for a in alternatives)
    return {"type": "string", "pattern": rf"^\s*(?:{body})?\s*$"}


def _bounds(knob: Knob) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    if knob.minimum is not None:
        bounds["exclusiveMinimum" if knob.min_exclusive else "minimum"] = knob.minimum
    if knob.maximum is not None:
        bounds["maximum"] = knob.maximum
    return bounds


def _forms(knob: Knob) -> list[dict[str, Any]]:
    """The typed form and the text form of one knob's value."""
    kind = knob.kind
    if kind is Kind.BOOL:
        return [{"type": "boolean"}, _text(*map(_any_case, TRUE_WORDS + FALSE_WORDS))]
    if kind is Kind.INT and knob.auto:
        return [{"type": "integer", **_bounds(knob)}, {"const": "auto"},
                _text(INT_RE.pattern, _any_case("auto"))]
    if kind is Kind.INT:
        return [{"type": "integer", **_bounds(knob)}, _text(INT_RE.pattern)]
    if kind is Kind.FLOAT:
        return [{"type": "number", **_bounds(knob)}, _text(FLOAT_RE.pattern)]
    if kind is Kind.CHOICE:
        return [{"type": "string", "enum": list(knob.choices or ())},
                _text(*map(_any_case, knob.choices or ()))]
    if kind is Kind.INT_LIST:
        item = INT_RE.pattern
        return [{"type": "array", "items": {"type": "integer", **_bounds(knob)}},
                _text(rf"\s*{item}\s*(?:,\s*{item}\s*)*")]
    if kind is Kind.SECRET:  # a security knob: blank is an error, not "unset"
        return [{"type": "string", "pattern": rf"^{SECRET_RE.pattern}$",
                 "not": {"pattern": r"^(['\"]).*\1$"}}]
    return [{"type": "string"}]


def knob_schema(knob: Knob) -> dict[str, Any]:
    forms = _forms(knob)
    if knob.optional:
        forms.append({"type": "null"})
    schema: dict[str, Any] = {"description": knob.description}
    if not knob.secret:
        schema["default"] = portable(knob.default)
    schema.update(forms[0] if len(forms) == 1 else {"anyOf": forms})
    schema.update({"x-unit": knob.unit, "x-category": knob.category,
                   "x-reloadable": knob.reloadable, "x-secret": knob.secret})
    return schema


def json_schema() -> dict[str, Any]:
    known = [k.env for k in KNOBS]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "mstar settings",
        "description": __doc__.split("\n\n", 1)[1].replace("\n", " ").strip(),
        "type": "object",
        "properties": {k.env: knob_schema(k) for k in KNOBS},
        "propertyNames": {"anyOf": [{"enum": known},
                                    {"not": {"pattern": "^" + _any_case(ENV_PREFIX)}}]},
    }


def render_schema() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"
