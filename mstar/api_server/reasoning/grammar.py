"""Structured output and tool grammars after the reasoning section, never inside it.

A request's constraint (any kind) becomes one grammar (xgrammar structural tags): an optional
``<think>...</think>`` section when the output may open one (``optional``), or reasoning text up to
``</think>`` when the prompt opened it (``inside``), then up to four newlines or spaces, then the
constraint. The reasoning text is free (any text without ``</think>``).
"""

from __future__ import annotations

import functools

from mstar.api_server.reasoning.split import END, START, Start
from mstar.engine.request.sampling_params import StructuredOutput

GAP = "[ \\n]{0,4}"  # what a model writes between </think> and its answer


def after_reasoning(constraint: StructuredOutput | None, start: Start
                    ) -> StructuredOutput | None:
    """``constraint`` applied after the reasoning section an output starting at ``start`` has."""
    if constraint is None or start == "off":
        return constraint
    spec = _prefixed(constraint.kind, constraint.spec, tuple(constraint.choices), start)
    return StructuredOutput(kind="grammar", spec=spec)


@functools.lru_cache(maxsize=64)
def _prefixed(kind: str, spec: str, choices: tuple[str, ...], start: Start) -> str:
    import xgrammar as xgr
    from xgrammar.structural_tag import (
        AnyTextFormat,
        GrammarFormat,
        OptionalFormat,
        RegexFormat,
        SequenceFormat,
        StructuralTag,
        TagFormat,
    )

    from mstar.api_server.tools.grammar import output_grammar

    section = TagFormat(begin="" if start == "inside" else START, content=AnyTextFormat(),
                        end=END)
    think = section if start == "inside" else OptionalFormat(content=section)
    constraint = StructuredOutput(kind=kind, spec=spec, choices=list(choices))
    answer = GrammarFormat(grammar=str(output_grammar(constraint)))
    tag = StructuralTag(format=SequenceFormat(elements=[think, RegexFormat(pattern=GAP), answer]))
    return str(xgr.Grammar.from_structural_tag(tag))
