"""The one lenient rule, applied to every knob from every source.

``coerce`` turns a raw value (text from the environment, an env file or a CLI flag, or a Python value
passed in code) into the value to use:

- empty or whitespace-only text means "not set here" (silently: templated env files often leave
  blanks), so the value from lower-precedence sources stands;
- a malformed value raises ``Rejected``: the caller keeps the value it had (the default unless a
  lower-precedence source set one) and reports the problem;
- a knob that takes ``auto`` takes it in any case;
- a value below the minimum is raised to it, above the maximum lowered to it, with a reason;
- anything else is used exactly as given.

Numbers are plain decimal ASCII (``[0-9]``, a sign, and for decimal knobs a point and an exponent):
``_`` separators, ``0x`` prefixes and non-ASCII digits such as ``５`` are malformed for every
numeric knob. A number of any length follows the rule: digits beyond every bound are clamped.

A security knob (``security=True`` in the schema) never falls back: the caller turns every problem
with it into an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from mstar.settings.catalog import Kind, Knob

UNSET = object()
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
# ASCII only: \d would also accept '５' and '٨٠٨٠'.
INT_RE = re.compile(r"[+-]?[0-9]+")
FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# More significant digits than this exceed every bound; int() itself refuses past 4300 digits.
_MAX_INT_DIGITS = 100
_BEYOND_EVERY_BOUND = 10**_MAX_INT_DIGITS
# Longest raw value repeated in a message.
_SHOWN_CHARS = 60
# Every secret (the API key travels in an HTTP header): visible ASCII, no spaces.
SECRET_RE = re.compile(r"[\x21-\x7e]+")


class Rejected(ValueError):
    """A raw value that cannot be used; the message says why."""


def _parse_int(text: str) -> int:
    if not INT_RE.fullmatch(text):
        raise Rejected("not a whole number (plain ASCII digits; no '_', '0x' or exponent)")
    if len(text.lstrip("+-").lstrip("0")) > _MAX_INT_DIGITS:
        return -_BEYOND_EVERY_BOUND if text.startswith("-") else _BEYOND_EVERY_BOUND
    return int(text)


def _parse_float(text: str) -> float:
    if not FLOAT_RE.fullmatch(text):
        raise Rejected("not a finite decimal number (plain ASCII digits; no '_' or '0x')")
    return float(text)  # may overflow to +-inf, which the bounds then clamp


def _parse_path(text: str) -> Path:
    if "\0" in text:
        raise Rejected("contains a NUL character")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # '~nosuchuser/x', or '~' without a home directory
        raise Rejected(f"cannot expand {text.split('/', 1)[0]!r} (no such user or home)") from None


def _parse_secret(text: str) -> SecretStr:
    if not SECRET_RE.fullmatch(text):
        raise Rejected("must be visible ASCII without spaces (like a bearer token in an HTTP "
                       "header)")
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        raise Rejected("is wrapped in quotes, which would become part of the key")
    return SecretStr(text)


def _parse_bool(text: str) -> bool:
    word = text.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise Rejected("not a boolean (use " + "/".join(TRUE_WORDS + FALSE_WORDS) + ")")


def _parse_choice(knob: Knob, text: str) -> str:
    for choice in knob.choices or ():
        if text.lower() == choice:
            return choice
    raise Rejected("not one of " + ", ".join(knob.choices or ()))


def _parse_int_list(knob: Knob, text: str) -> list[int]:
    items = [item.strip() for item in text.split(",")]
    values = []
    for item in items:
        try:
            value = _parse_int(item)
        except Rejected:
            raise Rejected(f"element {_shortened(item)!r} is not a whole number") from None
        if _out_of_bounds(knob, value):
            raise Rejected(f"element {_shortened(item)} is outside {describe_range(knob)}")
        values.append(value)
    return values


def parse_text(knob: Knob, text: str) -> Any:
    """Parse stripped, non-empty text into the knob's type (bounds not applied)."""
    if knob.kind is Kind.INT:
        return _parse_int(text)
    if knob.kind is Kind.FLOAT:
        return _parse_float(text)
    if knob.kind is Kind.BOOL:
        return _parse_bool(text)
    if knob.kind is Kind.CHOICE:
        return _parse_choice(knob, text)
    if knob.kind is Kind.INT_LIST:
        return _parse_int_list(knob, text)
    if knob.kind is Kind.PATH:
        return _parse_path(text)
    if knob.kind is Kind.SECRET:
        return _parse_secret(text)
    return text


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_as_text(v) for v in value)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _BEYOND_EVERY_BOUND:
        return str(_BEYOND_EVERY_BOUND if value > 0 else -_BEYOND_EVERY_BOUND)  # str() refuses 4300+
    return str(value)


def _shortened(text: str) -> str:
    if len(text) > _SHOWN_CHARS:
        return f"{text[:_SHOWN_CHARS // 2]}...({len(text)} characters)"
    return text


def shown_text(knob: Knob, raw: Any, mask: str) -> str:
    """The raw value as messages repeat it: masked for secrets (unless blank), shortened when long."""
    text = _as_text(raw)
    if knob.secret and text.strip():
        return mask
    return _shortened(text)


def _out_of_bounds(knob: Knob, value: float) -> bool:
    too_low = knob.minimum is not None and (
        value <= knob.minimum if knob.min_exclusive else value < knob.minimum)
    return too_low or (knob.maximum is not None and value > knob.maximum)


def describe_range(knob: Knob) -> str:
    low = "" if knob.minimum is None else f"{'>' if knob.min_exclusive else '>='} {knob.minimum:g}"
    high = "" if knob.maximum is None else f"<= {knob.maximum:g}"
    return " and ".join(part for part in (low, high) if part) or "any"


def coerce(knob: Knob, raw: Any) -> tuple[Any, str | None]:
    """Return (value to use, reason it differs from ``raw`` or None); ``UNSET`` if blank.

    Raises ``Rejected`` when the raw value cannot be used at all.
    """
    if raw is None:
        if knob.optional:
            return None, None
        raise Rejected("cannot be unset")
    text = _as_text(raw).strip()
    if not text:
        if knob.security:
            raise Rejected("is set but empty; unset the variable to turn it off")
        return UNSET, None
    if knob.auto and text.lower() == "auto":
        return "auto", None
    value = parse_text(knob, text)
    if knob.kind not in (Kind.INT, Kind.FLOAT):
        return value, None
    if knob.minimum is not None and knob.min_exclusive and value <= knob.minimum:
        # No smallest allowed value to clamp to, so this is treated as malformed.
        raise Rejected(f"must be greater than {knob.minimum:g}")
    if knob.minimum is not None and value < knob.minimum:
        return type(value)(knob.minimum), f"below the minimum {knob.minimum:g}"
    if knob.maximum is not None and value > knob.maximum:
        return type(value)(knob.maximum), f"above the maximum {knob.maximum:g}"
    return value, None
