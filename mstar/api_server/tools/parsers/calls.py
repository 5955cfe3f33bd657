"""What a tool-call parser yields: content text and complete calls, in output order.

A parser is incremental (``feed`` the new text, ``finish`` at the end); reading a whole output is
feeding it at once, so streaming and non-streaming responses agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text of the arguments object


Piece = str | ToolCall  # content text, or one complete call


class Dropped:
    """A call to an undeclared function that the policy removes from the reply."""


DROPPED = Dropped()
Verdict = ToolCall | None | Dropped  # a call; None: keep its markup as content; or dropped


@dataclass(frozen=True)
class Declared:
    """The functions a reply may call (name -> its ``parameters`` schema), and what becomes of a
    call to any other (``MSTAR_TOOL_CALL_UNDECLARED``): its markup stays content (``text``), or
    it is removed from the reply (``drop``)."""

    functions: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    undeclared: Literal["text", "drop"] = "text"

    def judge(self, call: ToolCall | None) -> Verdict:
        """What a decoded call (None: markup that did not decode) becomes."""
        if call is None or call.name in self.functions:
            return call
        return DROPPED if self.undeclared == "drop" else None


class CallStream(Protocol):
    def feed(self, text: str) -> list[Piece]: ...

    def finish(self) -> list[Piece]: ...


@dataclass(frozen=True)
class ParsedOutput:
    content: str | None  # None when the model said nothing outside its calls
    calls: list[ToolCall]


def parse_all(stream: CallStream, text: str) -> ParsedOutput:
    return collect(stream.feed(text) + stream.finish())


def collect(pieces: Iterable[Piece]) -> ParsedOutput:
    calls = [p for p in pieces if isinstance(p, ToolCall)]
    content = "".join(p for p in pieces if isinstance(p, str))
    return ParsedOutput(content or None, calls)


class TrimmedContent:
    """Content text without leading or trailing whitespace, passed on as it streams.

    Whitespace is held back until text follows it (dropped when nothing does), so the newlines a
    model puts around its calls never become a content delta of their own, and the streamed content
    is exactly the non-streaming ``content``.
    """

    def __init__(self) -> None:
        self._started = False
        self._held = ""

    def push(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._held += text
            return ""
        out = self._held + body
        self._held = text[len(body):]
        return out
