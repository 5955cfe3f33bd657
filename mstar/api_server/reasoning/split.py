"""Reasoning split out of a model's text as it streams: ``<think>REASONING</think>CONTENT``.

Where the output starts depends on the prompt (``plan.Start``): ``inside`` a section the
generation prompt opened (the text is reasoning up to ``</think>``), ``optional`` (a section is
reasoning only when the output begins with ``<think>``, after whitespace) or ``off`` (no
reasoning: all content, unchanged). Reasoning has no leading or trailing whitespace; content
after ``</think>`` has no leading whitespace. Text that may be the start of a tag is held back
until it is known not to be one, so no tag reaches a delta, and feeding the text in pieces splits it
exactly as feeding it whole. An output that ends inside the section is all reasoning.
"""

from __future__ import annotations

from typing import Literal

from mstar.api_server.tools.parsers.calls import TrimmedContent
from mstar.api_server.tools.parsers.tagged import partial_tag_len

START = "<think>"
END = "</think>"
Start = Literal["off", "optional", "inside"]


class ReasoningStream:
    def __init__(self, start: Start) -> None:
        self._state = {"off": "content", "optional": "start", "inside": "reasoning"}[start]
        self._buffer = ""
        self._reasoning = TrimmedContent()
        self._content_started = start == "off"

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning, content) of the new text, either possibly empty."""
        if self._state == "content":
            return "", self._content(text)
        self._buffer += text
        if self._state == "start":
            head = self._buffer.lstrip()
            if not head or (START.startswith(head) and head != START):
                return "", ""  # may still open a section
            if not head.startswith(START):
                self._state = "content"
                self._content_started = True  # no section: the text is content, unchanged
                text, self._buffer = self._buffer, ""
                return "", text
            self._buffer = head[len(START):]
            self._state = "reasoning"
        at = self._buffer.find(END)
        if at >= 0:
            reasoning = self._reasoning.push(self._buffer[:at])
            rest, self._buffer = self._buffer[at + len(END):], ""
            self._state = "content"
            return reasoning, self._content(rest)
        keep = partial_tag_len(self._buffer, END)
        safe = self._buffer[:len(self._buffer) - keep]
        self._buffer = self._buffer[len(safe):]
        return self._reasoning.push(safe), ""

    def finish(self) -> tuple[str, str]:
        """What was held back: reasoning when the output ended inside the section."""
        rest, self._buffer = self._buffer, ""
        if self._state == "reasoning":
            return self._reasoning.push(rest), ""
        return "", rest  # the output ended before it could open a section: content, unchanged

    def _content(self, text: str) -> str:
        if not self._content_started:
            text = text.lstrip()
            self._content_started = bool(text)
        return text


def split_reasoning(text: str, start: Start) -> tuple[str | None, str]:
    """A whole output's reasoning (None when there is none) and content."""
    return read_all(ReasoningStream(start), text)


def read_all(stream: ReasoningStream, text: str) -> tuple[str | None, str]:
    (r1, c1), (r2, c2) = stream.feed(text), stream.finish()
    return (r1 + r2) or None, c1 + c2
