"""Request fields no model declares, and what MSTAR_UNKNOWN_REQUEST_FIELDS makes of them.

``ignore``: nothing. ``warn``: a warning logged once per field name, and the response header
``X-Mstar-Ignored-Fields`` listing them. ``reject``: a 400 naming each one, with the closest known
field as a suggestion (the settings layer's rule).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel

from mstar.api_server.http.errors import APIError
from mstar.settings.names import close_matches

log = structlog.get_logger(__name__)

IGNORED_FIELDS_HEADER = "X-Mstar-Ignored-Fields"
MAX_WARNED = 256  # distinct names warned about; a client inventing names cannot grow it further
MAX_LISTED = 32  # names in the header (percent-encoded: header-safe whatever the client sent)


@dataclass(frozen=True)
class UnknownField:
    path: str  # dotted, with list indices: messages.0.foo
    suggestion: str | None  # dotted path of the closest known field

    def describe(self) -> str:
        hint = f" (did you mean '{self.suggestion}'?)" if self.suggestion else ""
        return f"'{self.path}'{hint}"


def _known(model: BaseModel) -> list[str]:
    return [f.alias or name for name, f in type(model).model_fields.items()]


def unknown_fields(value: Any, prefix: str = "") -> list[UnknownField]:
    """Every undeclared field in a validated request, nested models and lists included."""
    found: list[UnknownField] = []
    if isinstance(value, BaseModel):
        for name in value.model_extra or {}:
            meant = close_matches(name, _known(value), n=1)
            found.append(UnknownField(prefix + name, prefix + meant[0] if meant else None))
        for name in type(value).model_fields:
            found += unknown_fields(getattr(value, name), f"{prefix}{name}.")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += unknown_fields(item, f"{prefix}{i}.")
    return found


def unknown_names(sent: list[str], known: list[str]) -> list[UnknownField]:
    """The names in ``sent`` (a form's fields, in order) that ``known`` lacks."""
    return [UnknownField(name, (close_matches(name, known, n=1) or [None])[0])
            for name in dict.fromkeys(sent) if name not in known]


def _name(path: str) -> str:
    """The field's name whatever list item it was in (messages.3.foo -> messages.*.foo)."""
    return re.sub(r"\.\d+(?=\.|$)", ".*", path)


@dataclass
class UnknownFieldPolicy:
    """Applies MSTAR_UNKNOWN_REQUEST_FIELDS; remembers which names it already warned about."""

    mode: str
    warned: set[str] = field(default_factory=set)

    def headers(self, found: list[UnknownField]) -> dict[str, str]:
        """The response headers for a request with these unknown fields (or a 400 on reject)."""
        if not found or self.mode == "ignore":
            return {}
        if self.mode == "reject":
            names = ", ".join(f.describe() for f in found)
            raise APIError(400, f"unknown field{'s' if len(found) > 1 else ''}: {names} "
                           "(MSTAR_UNKNOWN_REQUEST_FIELDS=reject)", found[0].path)
        for f in found:
            name = _name(f.path)
            if name not in self.warned and len(self.warned) < MAX_WARNED:
                self.warned.add(name)
                log.warning("unknown_request_field_ignored", field=name,
                            suggestion=f.suggestion)
        listed = [urllib.parse.quote(f.path, safe="._-*") for f in found[:MAX_LISTED]]
        return {IGNORED_FIELDS_HEADER: ",".join(listed)}
