"""What the OpenAI-compatible endpoints do with each request field: the one source of truth.

Each row says whether a field is supported, an extra (not in OpenAI's API; vLLM's name), ignored by
design, rejected (a 400 "`field` is not supported" unless it has a value that asks for nothing),
or left to tool calling. ``docs/openai_api.rst`` embeds ``rst_table()`` (a test checks that it is
current: ``python -m mstar.api_server.validation.field_table`` prints it), the request models declare a field
for every top-level row (a test checks that too), ``rejected_field`` enforces the rejections, and
the test of each row sends its examples.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from mstar.api_server.validation import (
    audio_rows,
    embeddings_rows,
    messages_rows,
    responses_rows,
    scoring_rows,
    speech_rows,
)
from mstar.api_server.validation.field_rows import ROWS

Endpoint = Literal["chat", "completions", "responses", "messages", "embeddings", "rerank",
                   "score", "classify", "transcriptions", "translations", "speech"]
CHAT_AND_COMPLETIONS: tuple[Endpoint, ...] = ("chat", "completions")
Status = Literal["supported", "extra", "ignored", "rejected", "tool calling"]
STATUS_TEXT = {"supported": "supported", "extra": "supported (extra)",
               "ignored": "ignored by design", "rejected": "rejected (400)",
               "tool calling": "supported (tool calling)"}


@dataclass(frozen=True)
class FieldRow:
    """One field on some endpoints.

    ``accepted`` is a request fragment that is answered 200; ``refused`` one answered with
    ``refused_status`` naming ``param`` (for a rejected field, ``refused`` is the field used).
    ``allowed`` are the values of a rejected field that ask for nothing and pass.
    """

    name: str
    endpoints: tuple[Endpoint, ...]
    status: Status
    note: str
    accepted: dict[str, Any] | None = None
    refused: dict[str, Any] | None = None
    param: str = ""
    refused_status: int = 400
    allowed: tuple[Any, ...] = field(default=(None,))

    @property
    def error_param(self) -> str:
        return self.param or self.name


def rows_for(endpoint: Endpoint) -> list[FieldRow]:
    return [row for row in TABLE if endpoint in row.endpoints]


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def rejected_field(endpoint: Endpoint, values: dict[str, Any]) -> FieldRow | None:
    """The first rejected field that ``values`` (field name -> value) uses, if any."""
    for row in rows_for(endpoint):
        if row.status == "rejected" and row.name in values and not any(
                _same(values[row.name], ok) for ok in row.allowed):
            return row
    return None


def _fragment(value: dict[str, Any] | None) -> str:
    return f"``{json.dumps(value)}``" if value else ""


def rst_table(endpoints: tuple[Endpoint, ...] = CHAT_AND_COMPLETIONS) -> str:
    """The field table of these endpoints: chat and completions in docs/openai_api.rst, and one
    table each for responses, embeddings, rerank, score, classify and the audio routes (there
    too) and messages
    (docs/anthropic_api.rst)."""
    header = ["Field", "Endpoints", "Status", "Notes", "Accepted", "Refused"]
    lines = [".. list-table::", "   :header-rows: 1", "   :widths: 16 12 12 40 20 20", ""]
    rows = [row for row in TABLE if set(row.endpoints) & set(endpoints)]
    for cells in [header] + [
            [f"``{row.name}``", ", ".join(row.endpoints), STATUS_TEXT[row.status], row.note,
             _fragment(row.accepted), _fragment(row.refused)] for row in rows]:
        lines.append(f"   * - {cells[0]}")
        lines.extend(f"     - {cell}" if cell else "     -" for cell in cells[1:])
    return "\n".join(lines) + "\n"


TABLE: list[FieldRow] = [FieldRow(**row)
                         for row in [*ROWS, *responses_rows.ROWS, *messages_rows.ROWS,
                                     *embeddings_rows.ROWS, *scoring_rows.ROWS,
                                     *audio_rows.ROWS, *speech_rows.ROWS]]

if __name__ == "__main__":  # the table of the endpoints named (default: chat and completions)
    print(rst_table(tuple(sys.argv[1:]) or CHAT_AND_COMPLETIONS), end="")
