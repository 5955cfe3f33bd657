"""The EBNF grammar that forces a tool call (tool_choice ``required`` or a named function).

Output is one call in hermes format, ``<tool_call>\\n{"name": "<name>", "arguments": <object>}
\\n</tool_call>``, with ``<name>`` one of the allowed functions and ``<object>`` valid for that
function's ``parameters`` schema; with parallel_tool_calls, more calls may follow, one per line.
xgrammar writes each schema's grammar (compact JSON, no free whitespace, so a small model cannot
loop on spaces); the pieces are joined with ``Grammar.concat``/``union`` and printed as EBNF, the
text ``StructuredOutput(kind="grammar")`` carries to the engine.
"""

from __future__ import annotations

import functools
import json
import re

from mstar.api_server.tools.hermes import END, START

ONE_CALL_RULE = "tool_call_one"


class ParametersError(ValueError):
    """xgrammar cannot build a grammar from one function's ``parameters``."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position  # index into the functions given


def forced_call_grammar(functions: list[tuple[str, dict]], parallel: bool) -> str:
    """EBNF text of a call to one of ``functions`` ((name, parameters schema) pairs)."""
    return _grammar(json.dumps(functions, sort_keys=True), parallel)


@functools.lru_cache(maxsize=256)
def _grammar(functions_json: str, parallel: bool) -> str:
    import xgrammar as xgr

    calls = []
    for position, (name, parameters) in enumerate(json.loads(functions_json)):
        try:
            arguments = xgr.Grammar.from_json_schema(json.dumps(parameters), any_whitespace=False)
        except Exception as exc:  # xgrammar raises several types for unsupported schemas
            raise ParametersError(position, _reason(exc)) from None
        head = f'{START}\n{{"name": {json.dumps(name)}, "arguments": '
        calls.append(xgr.Grammar.concat(_literal(xgr, head), arguments,
                                        _literal(xgr, "}\n" + END)))
    one = str(calls[0] if len(calls) == 1 else xgr.Grammar.union(*calls))
    if not parallel:
        return one
    # Rename the single call's root so a new root can repeat it (nothing refers to a root).
    renamed = re.sub(r"^root ::=", f"{ONE_CALL_RULE} ::=", one, count=1, flags=re.M)
    return f'root ::= {ONE_CALL_RULE} ("\\n" {ONE_CALL_RULE})*\n{renamed}'


def _literal(xgr, text: str):
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")


def _reason(exc: Exception) -> str:
    """xgrammar's message without its C++ source location ("[time] file.cc:123: ")."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return re.sub(r"^\[[^\]]*\] \S+:\d+: ", "", first)
