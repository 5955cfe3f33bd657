"""What a tool-call parser yields: content text and complete calls, in output order.

A parser is incremental (``feed`` the new text, ``finish`` at the end); reading a whole output is
feeding it at once, so streaming and non-streaming responses agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text of the arguments object


Piece = str | ToolCall  # content text, or one complete call


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
