"""Bounds on a structured-output constraint, checked before xgrammar sees it.

xgrammar compiles in C++ and cannot be interrupted, and its compile time and memory grow with a
schema's size, its nesting and its enums. So every constraint is measured first, in Python and in
time linear in its size (no recursion: a nesting of any depth is walked with a stack):

- the JSON text of a schema, a grammar or a choice list: at most ``max_bytes``;
- a schema's nesting (each object or array level counts one): at most ``max_depth``;
- one ``enum`` (or the ``guided_choice`` list): at most ``max_enum`` entries;
- a ``guided_regex``, and each ``pattern`` of a schema: at most ``max_regex`` characters;
- every ``$ref`` of a schema points inside it (``#``, ``#/$defs/...``): xgrammar fetches nothing,
  and a reference it cannot resolve would leave that part of the output unconstrained.

Each failure is a ``ValueError`` whose message says which bound was passed; the caller names the
request field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from mstar.engine.request.sampling_params import StructuredOutput

KIB = 1024


@dataclass(frozen=True)
class GrammarLimits:
    max_bytes: int
    max_depth: int
    max_enum: int
    max_regex: int

    @classmethod
    def from_settings(cls, settings: Any) -> GrammarLimits:
        return cls(int(settings.grammar_max_schema_kb * KIB), settings.grammar_max_depth,
                   settings.grammar_max_enum_entries, settings.grammar_max_regex_length)


def check_constraint(spec: StructuredOutput, limits: GrammarLimits) -> None:
    """Raise ValueError if ``spec`` passes one of ``limits`` (see the module docstring)."""
    if spec.kind == "json_schema":
        check_size(spec.spec, limits)
        check_schema(parse_json(spec.spec), limits)
    elif spec.kind == "regex":
        check_regex(spec.spec, "the regex", limits)
    elif spec.kind == "grammar":
        check_size(spec.spec, limits)
    elif spec.kind == "choice":
        check_enum(len(spec.choices), "the choice list", limits)
        check_size(json.dumps(spec.choices), limits)


def parse_json(text: str) -> Any:
    """``json.loads``; text that is not JSON, or nests too deeply for Python's parser, is a
    ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None


def check_size(text: str, limits: GrammarLimits) -> None:
    size = len(text.encode())
    if size > limits.max_bytes:
        raise ValueError(f"is {size} bytes; at most {limits.max_bytes} "
                         f"(MSTAR_GRAMMAR_MAX_SCHEMA_KB={limits.max_bytes / KIB:g})")


def check_regex(pattern: str, where: str, limits: GrammarLimits) -> None:
    if len(pattern) > limits.max_regex:
        raise ValueError(f"{where} is {len(pattern)} characters; at most {limits.max_regex} "
                         f"(MSTAR_GRAMMAR_MAX_REGEX_LENGTH)")


def check_enum(count: int, where: str, limits: GrammarLimits) -> None:
    if count > limits.max_enum:
        raise ValueError(f"{where} has {count} entries; at most {limits.max_enum} "
                         "(MSTAR_GRAMMAR_MAX_ENUM_ENTRIES)")


def check_schema(schema: Any, limits: GrammarLimits) -> None:
    """Depth, enums, patterns and references of a parsed JSON schema, walked without recursion."""
    stack: list[tuple[Any, int, str]] = [(schema, 1, "#")]
    refs: list[tuple[str, str]] = []
    while stack:
        node, depth, path = stack.pop()
        if depth > limits.max_depth:
            raise ValueError(f"nests deeper than {limits.max_depth} levels at {path} "
                             "(MSTAR_GRAMMAR_MAX_DEPTH)")
        if isinstance(node, dict):
            _check_keywords(node, path, limits, refs)
            stack.extend((v, depth + 1, f"{path}/{k}") for k, v in node.items()
                         if isinstance(v, dict | list))
        else:
            stack.extend((v, depth + 1, f"{path}/{i}") for i, v in enumerate(node)
                         if isinstance(v, dict | list))
    for ref, path in refs:
        check_ref(schema, ref, path)


def _check_keywords(node: dict, path: str, limits: GrammarLimits,
                    refs: list[tuple[str, str]]) -> None:
    if isinstance(node.get("enum"), list):
        check_enum(len(node["enum"]), f"the enum at {path}", limits)
    if isinstance(node.get("pattern"), str):
        check_regex(node["pattern"], f"the pattern at {path}", limits)
    if isinstance(node.get("$ref"), str):
        refs.append((node["$ref"], path))


def check_ref(schema: Any, ref: str, path: str) -> None:
    """``ref`` must be a JSON pointer into ``schema`` itself: remote references are never fetched."""
    if not ref.startswith("#"):
        raise ValueError(f"the $ref {ref[:100]!r} at {path} points outside the schema; only "
                         "references inside it ('#/$defs/...') are supported")
    node = schema
    for token in filter(None, unquote(ref[1:]).split("/")):
        key = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            raise ValueError(f"the $ref {ref[:100]!r} at {path} points to nothing in the schema")
