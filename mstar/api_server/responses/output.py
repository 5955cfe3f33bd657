"""The output items of one response, and the typed stream events that build them.

Items come in output order: a ``message`` (one ``output_text`` part) for each run of text, a
``function_call`` for each call, a ``reasoning`` item for reasoning text (``reasoning()`` is the
hook a reasoning parser feeds; without one there are none). Every event carries a
``sequence_number``; the snapshots in events are copies, never the items still being built.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from mstar.api_server.openai.chat_output import new_call_id
from mstar.api_server.tools.parsers.calls import ToolCall


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def output_text(text: str = "") -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


class OutputItems:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None  # the message or reasoning item being written
        self._sequence = 0

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **copy.deepcopy(fields)}
        self._sequence += 1
        return event

    def text(self, delta: str) -> list[dict[str, Any]]:
        return self._write("message", delta)

    def reasoning(self, delta: str) -> list[dict[str, Any]]:
        return self._write("reasoning", delta)

    def call(self, call: ToolCall) -> list[dict[str, Any]]:
        events = self.close("completed")
        item = {"type": "function_call", "id": new_item_id("fc"), "call_id": new_call_id(),
                "name": call.name, "arguments": "", "status": "in_progress"}
        where = {"item_id": item["id"], "output_index": len(self.items)}
        events.append(self.event("response.output_item.added",
                                 output_index=len(self.items), item=item))
        self.items.append(item)
        item.update(arguments=call.arguments, status="completed")
        events += [self.event("response.function_call_arguments.delta", **where,
                              delta=call.arguments),
                   self.event("response.function_call_arguments.done", **where,
                              name=call.name, arguments=call.arguments),
                   self.event("response.output_item.done", output_index=where["output_index"],
                              item=item)]
        return events

    def close(self, status: str) -> list[dict[str, Any]]:
        """End the item being written (``status``: completed, or incomplete when cut short)."""
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        where = {"item_id": item["id"], "output_index": self.items.index(item),
                 "content_index": 0}
        part = item["content"][0]
        if item["type"] == "reasoning":
            done = [self.event("response.reasoning_text.done", **where, text=part["text"])]
        else:
            done = [self.event("response.output_text.done", **where, text=part["text"],
                               logprobs=[]),
                    self.event("response.content_part.done", **where, part=part)]
        return done + [self.event("response.output_item.done",
                                  output_index=where["output_index"], item=item)]

    def _write(self, kind: str, delta: str) -> list[dict[str, Any]]:
        events = []
        if self._open is not None and self._open["type"] != kind:
            events += self.close("completed")
        if self._open is None:
            events += self._start(kind)
        item = self._open
        item["content"][0]["text"] += delta
        where = {"item_id": item["id"], "output_index": len(self.items) - 1, "content_index": 0}
        name = "response.reasoning_text.delta" if kind == "reasoning" else \
            "response.output_text.delta"
        extra = {} if kind == "reasoning" else {"logprobs": []}
        return events + [self.event(name, **where, delta=delta, **extra)]

    def _start(self, kind: str) -> list[dict[str, Any]]:
        if kind == "reasoning":
            item = {"type": "reasoning", "id": new_item_id("rs"), "summary": [],
                    "content": [], "status": "in_progress"}
            part = {"type": "reasoning_text", "text": ""}
        else:
            item = {"type": "message", "id": new_item_id("msg"), "status": "in_progress",
                    "role": "assistant", "content": []}
            part = output_text()
        index = len(self.items)
        events = [self.event("response.output_item.added", output_index=index, item=item)]
        item["content"].append(part)
        self.items.append(item)
        self._open = item
        if kind == "message":
            events.append(self.event("response.content_part.added", item_id=item["id"],
                                     output_index=index, content_index=0, part=part))
        return events
