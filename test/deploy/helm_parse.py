"""The parser of ``helm_render``: Go template text to nodes, an action's words to tokens."""

from __future__ import annotations

import json
import re

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(-?\d+)|(:=|[|(),])|(\$?[\w.]*[\w]|\.))')


def args_of(tokens: list[str]) -> list[str | list[str]]:
    """A command's words, each parenthesized pipeline as one list of its tokens."""
    args: list[str | list[str]] = []
    depth = 0
    for t in tokens:
        if depth:
            depth += (t == "(") - (t == ")")
            if depth:
                args[-1].append(t)
        elif t == "(":
            depth = 1
            args.append([])
        else:
            args.append(t)
    return args


def split(tokens: list[str], sep: str) -> list[list[str]]:
    parts, depth = [[]], 0
    for t in tokens:
        depth += (t == "(") - (t == ")")
        if t == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def tokens_of(source: str) -> list[str]:
    found, at = [], 0
    while source[at:].strip():
        match = _TOKEN.match(source, at)
        if not match or match.end() == at:
            raise ValueError(f"cannot parse {source[at:]!r}")
        found.append(next(g for g in match.groups() if g is not None))
        at = match.end()
    return found


def parse(text: str) -> list:
    """Nodes: ("text", s), ("expr", tokens), ("if", [(tokens, body)], else_body),
    ("with", tokens, body), ("range", (k, v), tokens, body), ("define", name, body)."""
    pieces, at = [], 0
    for match in _ACTION.finditer(text):
        before = text[at:match.start()]
        pieces.append(("text", before.rstrip(" \t\n") if match.group(1) else before))
        pieces.append(("action", match.group(2).strip(), bool(match.group(3))))
        at = match.end()
    pieces.append(("text", text[at:]))
    for i, piece in enumerate(pieces):  # a "-}}" trims the whitespace after it
        if piece[0] == "action" and piece[2] and i + 1 < len(pieces):
            pieces[i + 1] = ("text", pieces[i + 1][1].lstrip(" \t\n"))
    nodes, end = _block(pieces, 0)
    assert end == len(pieces), "an {{ end }} without its block"
    return nodes


def _block(pieces: list, at: int) -> tuple[list, int]:
    nodes = []
    while at < len(pieces):
        kind, body = pieces[at][0], pieces[at][1]
        at += 1
        if kind == "text":
            nodes.append(("text", body))
            continue
        word, _, rest = body.partition(" ")
        if body.startswith("/*"):
            continue
        if word in ("end", "else"):
            return nodes, at - 1
        if word in ("if", "with", "define", "range"):
            inner, at = _block(pieces, at)
            node, at = _finish(word, rest, inner, pieces, at)
            nodes.append(node)
        else:
            nodes.append(("expr", tokens_of(body)))
    return nodes, at


def _finish(word: str, rest: str, inner: list, pieces: list, at: int) -> tuple[tuple, int]:
    if word != "if":
        assert pieces[at][1] == "end", f"{{{{ {pieces[at][1]} }}}} in a {word} block"
    if word == "define":
        return ("define", json.loads(rest), inner), at + 1
    if word == "with":
        return ("with", tokens_of(rest), inner), at + 1
    if word == "range":
        names, _, expr = rest.partition(":=")
        keys = tuple(n.strip() for n in names.split(","))
        return ("range", keys, tokens_of(expr), inner), at + 1
    arms, otherwise = [(tokens_of(rest), inner)], []
    while pieces[at][1] != "end":
        _, _, tail = pieces[at][1].partition(" ")  # "else" or "else if COND"
        body, at = _block(pieces, at + 1)
        if tail.startswith("if "):
            arms.append((tokens_of(tail[3:]), body))
        else:
            otherwise = body
    return ("if", arms, otherwise), at + 1
