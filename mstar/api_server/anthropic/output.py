"""The content blocks of one message, and the typed stream events that build them.

Blocks come in output order: a ``text`` block for each run of text, a ``tool_use`` block for each
call (its ``input`` streamed as one ``input_json_delta``), a ``thinking`` block for reasoning text
(``thinking()`` is the hook a reasoning parser feeds; without one there are none). Events are
(event type, data) pairs; the data carries ``type`` too, and snapshots are copies.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from mstar.api_server.tools.parsers.calls import ToolCall

Event = tuple[str, dict[str, Any]]
DELTAS = {"text": ("text_delta", "text"), "thinking": ("thinking_delta", "thinking")}


def new_tool_use_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def event(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **copy.deepcopy(fields)}


class ContentBlocks:
    def __init__(self) -> None:
        self.blocks: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the text or thinking block being written

    def text(self, delta: str) -> list[Event]:
        return self._write("text", delta)

    def thinking(self, delta: str) -> list[Event]:
        return self._write("thinking", delta)

    def call(self, call: ToolCall) -> list[Event]:
        events = self.close()
        block = {"type": "tool_use", "id": new_tool_use_id(), "name": call.name, "input": {}}
        index = len(self.blocks)
        events.append(event("content_block_start", index=index, content_block=block))
        block["input"] = json.loads(call.arguments)
        self.blocks.append(block)
        return events + [
            event("content_block_delta", index=index,
                  delta={"type": "input_json_delta", "partial_json": call.arguments}),
            event("content_block_stop", index=index)]

    def close(self) -> list[Event]:
        block, self._open = self._open, None
        if block is None:
            return []
        return [event("content_block_stop", index=self.blocks.index(block))]

    def _write(self, kind: str, delta: str) -> list[Event]:
        events = []
        if self._open is not None and self._open["type"] != kind:
            events += self.close()
        if self._open is None:
            block = {"type": kind, kind: ""} if kind == "text" else \
                {"type": kind, kind: "", "signature": ""}
            events.append(event("content_block_start", index=len(self.blocks),
                                content_block=block))
            self.blocks.append(block)
            self._open = block
        delta_type, key = DELTAS[kind]
        self._open[key] += delta
        return events + [event("content_block_delta", index=len(self.blocks) - 1,
                               delta={"type": delta_type, key: delta})]
