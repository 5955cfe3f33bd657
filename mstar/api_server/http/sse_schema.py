"""The OpenAPI schema of one server-sent event of a typed stream (``event: <type>`` and a JSON
``data`` object whose ``type`` repeats it): OpenAPI 3.1 without ``itemSchema`` describes each event
of a ``text/event-stream`` body, and ``contentSchema`` the JSON its ``data`` holds."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel


def typed_event_schema(data: type[BaseModel], description: str) -> dict[str, Any]:
    """``data``: a model without nested models (its schema has no references), whose ``type``
    field is a Literal of every event type."""
    names = list(typing.get_args(data.model_fields["type"].annotation))
    return {"type": "object", "description": description, "required": ["event", "data"],
            "properties": {
                "event": {"type": "string", "enum": names},
                "data": {"type": "string", "contentMediaType": "application/json",
                         "contentSchema": data.model_json_schema()}}}
