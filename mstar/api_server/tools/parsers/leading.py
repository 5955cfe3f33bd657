"""Calls that a model writes as its whole reply, at the very start (Llama 3's JSON, the pythonic
list): after leading whitespace and an optional opening tag, a reader takes one block of calls at a
time from the front of the text. Text that is not a block makes the rest of the output content,
tags and all; text that may still become one is held back, so no markup reaches a content delta.

A reader sees the text not yet taken and answers: a block (its calls and how many characters it
took), ``MORE`` (it needs more text) or ``NOT_CALLS``. A block is recognised only once complete,
so feeding the text in pieces reads it exactly as feeding it whole.
"""

from __future__ import annotations

from collections.abc import Callable

from mstar.api_server.tools.parsers.calls import DROPPED, Declared, Piece, ToolCall, TrimmedContent
from mstar.api_server.tools.parsers.tagged import partial_tag_len

MORE = "more"
NOT_CALLS = "not calls"
Read = tuple[list[ToolCall], int] | str
Reader = Callable[[str], Read]


class LeadingCallsStream:
    def __init__(self, openers: tuple[str, ...], begins: str, reader: Reader,
                 declared: Declared) -> None:
        self._openers = openers  # tags that may precede the calls (dropped)
        self._begins = begins  # characters a block of calls starts with
        self._reader = reader
        self._declared = declared
        self._state = "start"  # start -> calls -> content
        self._raw = ""  # text not yet passed on, as written (opener included)
        self._body = ""  # the same without the opener: what the reader sees
        self._content = TrimmedContent()

    def feed(self, text: str) -> list[Piece]:
        pieces: list[Piece] = []
        if self._state == "content":
            self._add_content(text, pieces)
            return pieces
        self._raw += text
        self._body += text
        if self._state == "start":
            self._start(pieces)
        while self._state == "calls":
            read = self._reader(self._body)
            if read == MORE:
                break
            if read == NOT_CALLS:
                self._to_content(pieces)
                break
            calls, taken = read
            verdicts = [self._declared.judge(c) for c in calls]
            if any(v is None for v in verdicts):  # an undeclared call stays text
                self._to_content(pieces)
                break
            pieces += [v for v in verdicts if v is not DROPPED]
            self._body = self._body[taken:]
            self._raw = self._body
        return pieces

    def finish(self) -> list[Piece]:
        pieces: list[Piece] = []
        self._add_content(self._raw, pieces)
        self._raw = self._body = ""
        self._state = "content"
        return pieces

    def _start(self, pieces: list[Piece]) -> None:
        head = self._body.lstrip()
        if not head:
            return
        for opener in self._openers:
            if head.startswith(opener):
                self._body = head[len(opener):]
                self._state = "calls"
                return
            if partial_tag_len(head, opener) == len(head):
                return  # may still become the opener
        if head[0] in self._begins:
            self._body = head
            self._state = "calls"
        else:
            self._to_content(pieces)

    def _to_content(self, pieces: list[Piece]) -> None:
        self._state = "content"
        self._add_content(self._raw, pieces)
        self._raw = self._body = ""

    def _add_content(self, text: str, pieces: list[Piece]) -> None:
        out = self._content.push(text)
        if out:
            pieces.append(out)
