"""Mistral's calls, after a ``[TOOL_CALLS]`` tag: a JSON list ``[{"name": ..., "arguments":
{...}}, ...]`` (v3 tokenizers), or ``name[ARGS]{...}`` (v11 and later, one call per tag). Text
before the tag is content. A block that does not decode stays content, tag and all.
"""

from __future__ import annotations

import json
import re

from mstar.api_server.tools.parsers.calls import DROPPED, Declared, Piece, ToolCall, TrimmedContent
from mstar.api_server.tools.parsers.llama3_json import to_call
from mstar.api_server.tools.parsers.tagged import partial_tag_len

START = "[TOOL_CALLS]"
ARGS = "[ARGS]"
NAME = re.compile(r"[A-Za-z0-9_-]*")
MORE = None


def read_block(body: str) -> tuple[list[ToolCall] | None, int] | None:
    """The calls at the front of ``body`` (the text after the tag) and the characters they took;
    ``(None, 0)`` when it is not a block, None when more text is needed."""
    stripped = body.lstrip()
    skipped = len(body) - len(stripped)
    if not stripped:
        return MORE
    decoder = json.JSONDecoder(strict=False)
    if stripped[0] == "[":
        try:
            value, end = decoder.raw_decode(stripped)
        except (ValueError, RecursionError):
            return MORE
        calls = [to_call(v) for v in value] if isinstance(value, list) and value else [None]
        return (None, 0) if None in calls else (calls, skipped + end)
    name = NAME.match(stripped)[0]
    rest = stripped[len(name):]
    if not rest.startswith(ARGS):
        return MORE if name and ARGS.startswith(rest) else (None, 0)
    try:
        arguments, end = decoder.raw_decode(rest[len(ARGS):].lstrip())
    except (ValueError, RecursionError):
        return MORE
    if not isinstance(arguments, dict):
        return None, 0
    taken = len(stripped) - len(rest[len(ARGS):].lstrip()) + end
    return [ToolCall(name, json.dumps(arguments, ensure_ascii=False))], skipped + taken


class MistralCallStream:
    def __init__(self, declared: Declared) -> None:
        self._declared = declared
        self._buffer = ""
        self._in_block = False
        self._content = TrimmedContent()

    def feed(self, text: str) -> list[Piece]:
        self._buffer += text
        pieces: list[Piece] = []
        while True:
            if not self._in_block:
                at = self._buffer.find(START)
                if at < 0:
                    keep = partial_tag_len(self._buffer, START)
                    self._add_content(self._buffer[:len(self._buffer) - keep], pieces)
                    self._buffer = self._buffer[len(self._buffer) - keep:]
                    return pieces
                self._add_content(self._buffer[:at], pieces)
                self._buffer = self._buffer[at + len(START):]
                self._in_block = True
            read = read_block(self._buffer)
            if read is MORE:
                return pieces
            calls, taken = read
            verdicts = [self._declared.judge(c) for c in calls or [None]]
            if calls is None or any(v is None for v in verdicts):
                self._add_content(START, pieces)  # not a block: the tag is text, read on
            else:
                pieces += [v for v in verdicts if v is not DROPPED]
                self._buffer = self._buffer[taken:]
            self._in_block = False

    def finish(self) -> list[Piece]:
        pieces: list[Piece] = []
        self._add_content((START if self._in_block else "") + self._buffer, pieces)
        self._buffer, self._in_block = "", False
        return pieces

    def _add_content(self, text: str, pieces: list[Piece]) -> None:
        out = self._content.push(text)
        if out:
            pieces.append(out)


def stream(declared: Declared) -> MistralCallStream:
    return MistralCallStream(declared)
