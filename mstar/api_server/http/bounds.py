"""The size limits a request is held to, one function per limit, used by every route.

Each API names its fields its own way (chat's ``stop`` is the Messages API's ``stop_sequences``;
chat's ``messages`` is the Responses API's ``input``), so a request lists what it holds as
``Counted`` values (``counted()`` on each request model: the count, and the field by the request's
own name) and the gate checks them all with ``check_counts`` before anything walks the lists. Every
route thus gets the same 400 for the same excess, naming its own field. Text length
(MSTAR_MAX_PROMPT_CHARS) is checked where the text is made, by ``check_prompt_chars``: a 413.

The limits are here, below every API, so that no route can hold its own copy of one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mstar.api_server.http.errors import APIError


@dataclass(frozen=True)
class Limit:
    """One limit on how many entries a field may hold: its knob, and what it counts."""

    knob: str  # the MSTAR_* name, quoted in the error
    unit: str  # what one entry is, in the error ("strings", "entries")
    most: Callable[[Any], int]  # the bound, read from the running settings


STOP_STRINGS = Limit("MSTAR_MAX_STOP_STRINGS", "strings", lambda s: s.max_stop_strings)
LOGIT_BIAS = Limit("MSTAR_MAX_LOGIT_BIAS_ENTRIES", "entries", lambda s: s.max_logit_bias_entries)
TOOLS = Limit("MSTAR_MAX_TOOLS", "tools", lambda s: s.max_tools)
MESSAGES = Limit("MSTAR_MAX_MESSAGES", "messages", lambda s: s.max_messages)
EMBEDDING_INPUTS = Limit("MSTAR_EMBEDDING_MAX_INPUTS", "items", lambda s: s.embedding_max_inputs)


@dataclass(frozen=True)
class Counted:
    """How many entries a request's ``field`` holds, under ``limit``."""

    limit: Limit
    field: str  # the request's own name for it (the ``param`` of the 400)
    count: int


def check_count(counted: Counted, settings: Any) -> None:
    """A 400 naming the field when it holds more entries than its limit allows."""
    most = counted.limit.most(settings)
    if counted.count > most:
        raise APIError(400, f"{counted.field} has {counted.count} {counted.limit.unit}; at most "
                       f"{most} per request ({counted.limit.knob})", counted.field)


def check_counts(counts: Iterable[Counted], settings: Any) -> None:
    for counted in counts:
        check_count(counted, settings)


def check_prompt_chars(chars: int, max_chars: int, param: str) -> None:
    """A 413 naming ``param`` when a text of ``chars`` characters is longer than
    MSTAR_MAX_PROMPT_CHARS."""
    if chars > max_chars:
        raise APIError(413, f"{param} has {chars} characters; at most {max_chars} are "
                       "tokenized per text (MSTAR_MAX_PROMPT_CHARS)", param)
