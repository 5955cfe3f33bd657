"""Recognising names that were meant to be a knob: typos, another case, invisible characters."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from mstar.settings.catalog import BY_ENV, Knob
from mstar.settings.schema import ENV_PREFIX

_BARE_PREFIX = ENV_PREFIX.rstrip("_")
_TAILS = {env[len(ENV_PREFIX):]: knob for env, knob in BY_ENV.items()}


@dataclass(frozen=True)
class UnknownName:
    """A name that looks like an ``MSTAR_*`` knob but is none; ``meant`` is the closest knob."""

    reason: str
    meant: Knob | None
    error: bool  # it may have been meant for a security knob: fail closed


def _normalized(name: str) -> str:
    """Upper case, without invisible characters (a BOM, zero-width spaces) or spaces; '-' as '_'."""
    visible = "".join(ch for ch in name if ch.isprintable() and not ch.isspace())
    return visible.upper().replace("-", "_")


def close_matches(name: str, known: list[str], n: int = 5) -> list[str]:
    """The known names ``name`` may have been meant as, closest first (the "did you mean" rule
    of settings, reused for request fields)."""
    return difflib.get_close_matches(name, known, n=n, cutoff=0.6)


def _candidates(tail: str) -> list[Knob]:
    if tail in _TAILS:
        return [_TAILS[tail]]
    return [_TAILS[t] for t in close_matches(tail, list(_TAILS))]


def classify_unknown(name: str) -> UnknownName | None:
    """None for a name that is no attempt at a knob (``HOME``); else what it may have meant.

    A known name means itself. A name that could have meant a security knob is an error, even
    when another knob is a closer match.
    """
    normalized = _normalized(name)
    if not normalized.startswith(_BARE_PREFIX):
        return None
    candidates = _candidates(normalized[len(_BARE_PREFIX):].lstrip("_"))
    if not candidates:
        # 'MSTARDOM' is someone else's; 'MSTAR_NOSUCH' is an unknown knob.
        return UnknownName("unknown setting", None, error=False) if normalized.startswith(
            ENV_PREFIX) else None
    security = next((k for k in candidates if k.security), None)
    meant = security or candidates[0]
    if normalized == meant.env:
        reason = (f"not a setting name (differs from {meant.env} in case, spaces or invisible "
                  f"characters); did you mean {meant.env}?")
    else:
        reason = f"unknown setting; did you mean {meant.env}?"
    if security is not None:
        reason += (f" {security.env} is a security setting, so this is an error: "
                   "correct or remove the name")
    return UnknownName(reason, meant, error=security is not None)
