"""The tool-call parsers, by name (MSTAR_TOOL_CALL_PARSER). Each is imported only when chosen.

``auto`` picks the first parser whose marker the model's chat template contains, and hermes when
none does (also the format the built-in model is taught, see ``template``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mstar.api_server.tools.calls import CallStream

FALLBACK = "hermes"


@dataclass(frozen=True)
class ParserEntry:
    module: str  # defines ``stream() -> CallStream``
    marker: str  # a template containing this writes calls in this format


PARSERS: dict[str, ParserEntry] = {
    "hermes": ParserEntry("mstar.api_server.tools.hermes", "<tool_call>"),
}


def parser_name(setting: str, chat_template: Any) -> str:
    """The parser a ``tool_call_parser`` setting means for a model with this chat template."""
    if setting != "auto":
        return setting
    source = template_source(chat_template)
    return next((name for name, entry in PARSERS.items() if entry.marker in source), FALLBACK)


def stream_factory(name: str) -> Callable[[], CallStream]:
    return importlib.import_module(PARSERS[name].module).stream


def template_source(chat_template: Any) -> str:
    """All of a tokenizer's chat template text (it may be a dict of named templates)."""
    if isinstance(chat_template, dict):
        return "\n".join(str(t) for t in chat_template.values())
    return chat_template or ""
