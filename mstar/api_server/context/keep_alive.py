"""Ollama's per-request ``keep_alive``: how long the request's model stays loaded once idle, when
the server serves several models (MSTAR_MODELS). Seconds (a number), or a duration such as
"300", "30s", "5m", "1h", "250ms"; negative: never unloaded for idleness; 0: unloaded as soon as
it is idle. The request models declare the field with ``PATTERN`` (a 400 names it), and the
model pool reads it with ``keep_alive_seconds``."""

from __future__ import annotations

import re

from mstar.settings.knobs.field import MAX_WAIT_S

PATTERN = r"^-?\d+(\.\d+)?(ms|s|m|h)?$"
UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}
_SPLIT = re.compile(r"^(-?\d+(?:\.\d+)?)(ms|s|m|h)?$")


def keep_alive_seconds(value: object) -> float | None:
    """Seconds (negative: forever), None when absent; ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("keep_alive: a number of seconds or a duration such as '5m'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _SPLIT.match(str(value).strip())
        if match is None:
            raise ValueError(f"keep_alive: {value!r} is not a number of seconds or a duration "
                             "such as '30s', '5m', '1h'")
        seconds = float(match.group(1)) * UNITS_S[match.group(2) or ""]
    if seconds != seconds or seconds > MAX_WAIT_S:
        raise ValueError(f"keep_alive: at most {MAX_WAIT_S:g} seconds")
    return -1.0 if seconds < 0 else seconds
