"""Calls written between a start and an end tag (``<tool_call>...</tool_call>``), read as they
stream: text that may be the start of a tag is held back until it is known not to be one, so no
markup ever reaches a content delta. A call whose body does not decode stays content, tags and all,
as does a call the output ends inside; a call to an undeclared function is judged by ``Declared``.
"""

from __future__ import annotations

from collections.abc import Callable

from mstar.api_server.tools.parsers.calls import DROPPED, Declared, Piece, ToolCall, TrimmedContent

DecodeBody = Callable[[str], ToolCall | None]


class TaggedCallStream:
    def __init__(self, start: str, end: str, decode: DecodeBody, declared: Declared) -> None:
        self._start = start
        self._end = end
        self._decode = decode
        self._declared = declared
        self._buffer = ""
        self._in_call = False
        self._content = TrimmedContent()

    def feed(self, text: str) -> list[Piece]:
        self._buffer += text
        pieces: list[Piece] = []
        while True:
            tag = self._end if self._in_call else self._start
            at = self._buffer.find(tag)
            if at < 0:
                break
            before, self._buffer = self._buffer[:at], self._buffer[at + len(tag):]
            if self._in_call:
                self._close_call(before, pieces)
            else:
                self._add_content(before, pieces)
            self._in_call = not self._in_call
        if not self._in_call:
            keep = partial_tag_len(self._buffer, self._start)
            safe = self._buffer[:len(self._buffer) - keep]
            self._buffer = self._buffer[len(safe):]
            self._add_content(safe, pieces)
        return pieces

    def finish(self) -> list[Piece]:
        rest = (self._start if self._in_call else "") + self._buffer
        self._buffer, self._in_call = "", False
        pieces: list[Piece] = []
        self._add_content(rest, pieces)
        return pieces

    def _close_call(self, body: str, pieces: list[Piece]) -> None:
        verdict = self._declared.judge(self._decode(body))
        if verdict is None:
            self._add_content(self._start + body + self._end, pieces)
        elif verdict is not DROPPED:
            pieces.append(verdict)

    def _add_content(self, text: str, pieces: list[Piece]) -> None:
        out = self._content.push(text)
        if out:
            pieces.append(out)


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper beginning of ``tag``."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
