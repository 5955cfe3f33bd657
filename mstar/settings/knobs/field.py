"""How a knob is declared: ``knob()`` and the limits every group shares."""

from __future__ import annotations

import functools
import threading
from typing import Any

from pydantic import Field

# Longest wait threading primitives accept; waits beyond it raise OverflowError.
MAX_WAIT_S = threading.TIMEOUT_MAX
MAX_WAIT_MS = threading.TIMEOUT_MAX * 1000.0
# Upper bound for counts, so that a typo such as 10**20 cannot reach torch or the allocator.
MAX_COUNT = 2**31 - 1


def knob(default: Any, description: str, *, category: str, unit: str | None = None,
         secret: bool = False, security: bool = False, no_effect: str | None = None,
         **bounds: Any) -> Any:
    """A field with the metadata every consumer of the schema relies on.

    ``secret`` masks the value wherever it is shown. ``security`` marks a knob whose lenient
    fallback could weaken security: every problem with it (a malformed or empty value, a near-miss
    name) is an error in every mode. ``no_effect``: the knob no longer does anything; the text
    says since when and why. It still parses (old env files keep working), setting it warns
    "MSTAR_X has no effect since ...", and ``mstar config show`` marks it.
    """
    extra = {"unit": unit, "category": category, "secret": secret, "security": security,
             "no_effect": no_effect}
    return Field(default, description=description, json_schema_extra=extra, **bounds)



_loop = functools.partial(knob, category="Worker loop")
_server = functools.partial(knob, category="Server")
_engine = functools.partial(knob, category="Model and engine")
_transport = functools.partial(knob, category="Transport")
_config = functools.partial(knob, category="Config behaviour")
_limits = functools.partial(knob, category="Request limits")
_media = functools.partial(knob, category="Images")
_speculative = functools.partial(knob, category="Speculative decoding")
_admission = functools.partial(knob, category="Keys, priorities and tracing")
