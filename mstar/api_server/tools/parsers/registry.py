"""The tool-call parsers, by name (MSTAR_TOOL_CALL_PARSER). Each is imported only when chosen.

``auto`` picks the first parser (in the order of ``PARSERS``) one of whose markers the model's chat
template contains, and hermes when none does (also the format the built-in model is taught, see
``template``). A constrained call (a grammar writes it) is always in hermes format, so the hermes
parser reads it whatever the setting (``CONSTRAINED_FORMAT``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mstar.api_server.tools.parsers.calls import CallStream, Declared

FALLBACK = "hermes"
CONSTRAINED_FORMAT = "hermes"


@dataclass(frozen=True)
class ParserEntry:
    module: str  # defines ``stream(declared) -> CallStream``
    markers: tuple[str, ...]  # a template containing one of these writes calls in this format


PARSERS: dict[str, ParserEntry] = {
    # Qwen3-Coder's template has <tool_call> too: its XML markers are checked first.
    "qwen3_coder": ParserEntry("mstar.api_server.tools.parsers.qwen3_coder", ("<function=", "<parameter=")),
    "hermes": ParserEntry("mstar.api_server.tools.parsers.hermes", ("<tool_call>",)),
    "mistral": ParserEntry("mstar.api_server.tools.parsers.mistral", ("[TOOL_CALLS]",)),
    "pythonic": ParserEntry("mstar.api_server.tools.parsers.pythonic",
                            ("<|python_start|>", "[func_name1(")),
    "llama3_json": ParserEntry("mstar.api_server.tools.parsers.llama3_json",
                               ("<|python_tag|>", '{"name": function name')),
}


def parser_name(setting: str, chat_template: Any) -> str:
    """The parser a ``tool_call_parser`` setting means for a model with this chat template."""
    if setting != "auto":
        return setting
    source = template_source(chat_template)
    return next((name for name, entry in PARSERS.items()
                 if any(marker in source for marker in entry.markers)), FALLBACK)


def stream_factory(name: str) -> Callable[[Declared], CallStream]:
    return importlib.import_module(PARSERS[name].module).stream


def template_source(chat_template: Any) -> str:
    """All of a tokenizer's chat template text (it may be a dict of named templates)."""
    if isinstance(chat_template, dict):
        return "\n".join(str(t) for t in chat_template.values())
    return chat_template or ""
