"""Tool calls in OpenAI's response shapes: the final message, and the deltas of a stream.

With a reasoning parser, reasoning is split out first: ``message.reasoning_content`` (null when
there is none) and ``reasoning_content`` deltas; calls are read from the content that follows.
A reply with calls ends with finish_reason ``tool_calls`` (unless it was cut by max_tokens:
``length`` stays). Without parallel_tool_calls only the first call is returned. Each call gets an
id ``call_<24 hex>``. In a stream a call is sent once it is complete: a first delta with index, id,
type, name and ``arguments: ""``, then one with its arguments.
"""

from __future__ import annotations

import uuid
from typing import Any

from mstar.api_server.openai.chat_plan import OutputReading, PieceReader, ReasoningText
from mstar.api_server.reasoning.split import read_all
from mstar.api_server.tools.parsers.calls import ToolCall, parse_all


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def final_message(reading: OutputReading, text: str, finish_reason: str | None
                  ) -> tuple[dict[str, Any], str | None]:
    """The assistant message of a non-streaming choice, and its finish_reason."""
    message: dict[str, Any] = {"role": "assistant"}
    if reading.new_reasoning is not None:
        message["reasoning_content"], text = read_all(reading.new_reasoning(), text)
    plan = reading.tools
    if plan.new_parser is None:
        return {**message, "content": text}, finish_reason
    parsed = parse_all(plan.new_parser(), text)
    calls = parsed.calls if plan.parallel else parsed.calls[:1]
    message["content"] = parsed.content
    if calls:
        message["tool_calls"] = [
            {"id": new_call_id(), "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return message, _finish_reason(finish_reason, bool(calls))


class StreamedChoice:
    """One choice of a chat stream: its chunks, built from the pieces ``PieceReader`` reads."""

    def __init__(self, reading: OutputReading) -> None:
        self._plain = reading.plain
        self._reader = PieceReader(reading)

    def chunks(self, item: dict[str, Any], text: str, finished: bool) -> list[dict[str, Any]]:
        """The stream choices for this new text. ``item`` holds index, logprobs and finish_reason:
        logprobs go on the first chunk, finish_reason on the last. Nothing when the text was all
        held back (a possible tag) and there is nothing else to send."""
        if self._plain:
            return [{**item, "delta": {"content": text}}]
        index = self._reader.calls  # the index of the next call read
        deltas: list[dict[str, Any]] = []
        for piece in self._reader.read(text, finished):
            if isinstance(piece, ReasoningText):
                deltas.append({"reasoning_content": piece.text})
            elif isinstance(piece, ToolCall):
                deltas += _call_deltas(index, piece)
                index += 1
            else:
                deltas.append({"content": piece})
        reason = _finish_reason(item["finish_reason"], self._reader.calls > 0)
        if not deltas:
            return [{**item, "delta": {}, "finish_reason": reason}] if (
                reason is not None or item["logprobs"]) else []
        out = [{**item, "delta": d, "logprobs": None, "finish_reason": None} for d in deltas]
        out[0]["logprobs"] = item["logprobs"]
        out[-1]["finish_reason"] = reason
        return out


def _call_deltas(index: int, call: ToolCall) -> list[dict[str, Any]]:
    head = {"index": index, "id": new_call_id(), "type": "function",
            "function": {"name": call.name, "arguments": ""}}
    return [{"tool_calls": [head]},
            {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}]


def _finish_reason(reason: str | None, called: bool) -> str | None:
    return "tool_calls" if called and reason == "stop" else reason
