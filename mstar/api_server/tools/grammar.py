"""EBNF grammars that constrain tool calls, the text ``StructuredOutput(kind="grammar")`` carries
to the engine. Calls are in hermes format, ``<tool_call>\\n{"name": "<name>", "arguments":
<object>}\\n</tool_call>``, with ``<name>`` one of the allowed functions and ``<object>`` valid for
its ``parameters`` schema.

* ``forced_call_grammar`` (tool_choice ``required`` or a named function): nothing but calls; one,
  or with parallel_tool_calls one or more, back to back (with a newline allowed between them, the
  built-in model wrote call after call until max_tokens; without, it stops after its first).
  xgrammar writes each schema's grammar (compact JSON without free whitespace, so a small model
  cannot loop on spaces); the pieces are joined with ``Grammar.concat``/``union`` and printed as
  EBNF.
* ``calls_in_text_grammar`` (tool_choice ``auto`` with a ``strict`` function): any text, and
  whatever follows a ``<tool_call>`` tag is a valid call (xgrammar's triggered tags).
* ``calls_or_output_grammar`` (tool_choice ``auto`` with ``response_format`` or a ``guided_*``
  constraint): either calls, as in ``forced_call_grammar``, or the requested output.
"""

from __future__ import annotations

import functools
import json
import re

from mstar.api_server.tools.parsers.hermes import END, START
from mstar.engine.request.sampling_params import StructuredOutput

ONE_CALL_RULE = "tool_call_one"


class ParametersError(ValueError):
    """xgrammar cannot build a grammar from one function's ``parameters``."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position  # index into the functions given


def forced_call_grammar(functions: list[tuple[str, dict]], parallel: bool) -> str:
    """EBNF text of a call to one of ``functions`` ((name, parameters schema) pairs)."""
    return _forced(json.dumps(functions, sort_keys=True), parallel)


def calls_in_text_grammar(functions: list[tuple[str, dict]], parallel: bool) -> str:
    """EBNF text of free text in which every call is to one of ``functions``, validly."""
    return _in_text(json.dumps(functions, sort_keys=True), parallel)


def calls_or_output_grammar(functions: list[tuple[str, dict]], parallel: bool,
                            output: StructuredOutput) -> str:
    """EBNF text of either calls (as ``forced_call_grammar``) or the ``output`` constraint."""
    import xgrammar as xgr

    calls = xgr.Grammar.from_ebnf(forced_call_grammar(functions, parallel))
    return str(xgr.Grammar.union(calls, output_grammar(output)))


def output_grammar(output: StructuredOutput):
    """The xgrammar Grammar of a request's structured-output constraint (any kind)."""
    import xgrammar as xgr

    from mstar.engine.structured.structured_output import ANY_OBJECT_SCHEMA, choice_grammar

    if output.kind in ("json_object", "json_schema"):
        schema = ANY_OBJECT_SCHEMA if output.kind == "json_object" else output.spec
        return xgr.Grammar.from_json_schema(schema, any_whitespace=False)
    if output.kind == "regex":
        return xgr.Grammar.from_regex(output.spec)
    if output.kind == "choice":
        return xgr.Grammar.from_ebnf(choice_grammar(list(output.choices)))
    return xgr.Grammar.from_ebnf(output.spec)


def _call_head(name: str) -> str:
    return f'{START}\n{{"name": {json.dumps(name)}, "arguments": '


CALL_TAIL = "}\n" + END


@functools.lru_cache(maxsize=256)
def _forced(functions_json: str, parallel: bool) -> str:
    import xgrammar as xgr

    calls = []
    for position, (name, parameters) in enumerate(json.loads(functions_json)):
        arguments = _arguments_grammar(position, parameters)
        calls.append(xgr.Grammar.concat(_literal(_call_head(name)), arguments,
                                        _literal(CALL_TAIL)))
    one = str(calls[0] if len(calls) == 1 else xgr.Grammar.union(*calls))
    if not parallel:
        return one
    # Rename the single call's root so a new root can repeat it (nothing refers to a root).
    renamed = re.sub(r"^root ::=", f"{ONE_CALL_RULE} ::=", one, count=1, flags=re.M)
    return f"root ::= {ONE_CALL_RULE}+\n{renamed}"


@functools.lru_cache(maxsize=256)
def _in_text(functions_json: str, parallel: bool) -> str:
    import xgrammar as xgr
    from xgrammar.structural_tag import (
        JSONSchemaFormat,
        StructuralTag,
        TagFormat,
        TriggeredTagsFormat,
    )

    tags = []
    for position, (name, parameters) in enumerate(json.loads(functions_json)):
        _arguments_grammar(position, parameters)  # names the function whose schema fails
        tags.append(TagFormat(begin=_call_head(name), content=JSONSchemaFormat(json_schema=parameters),
                              end=CALL_TAIL))
    text = TriggeredTagsFormat(triggers=[START], tags=tags, stop_after_first=not parallel)
    return str(xgr.Grammar.from_structural_tag(StructuralTag(format=text)))


def _arguments_grammar(position: int, parameters: dict):
    import xgrammar as xgr

    try:
        return xgr.Grammar.from_json_schema(json.dumps(parameters), any_whitespace=False)
    except Exception as exc:  # xgrammar raises several types for unsupported schemas
        raise ParametersError(position, _reason(exc)) from None


def _literal(text: str):
    import xgrammar as xgr

    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")


def _reason(exc: Exception) -> str:
    """xgrammar's message without its C++ source location ("[time] file.cc:123: ")."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^\[[^\]]*\] \S+:\d+: ", "", first)
