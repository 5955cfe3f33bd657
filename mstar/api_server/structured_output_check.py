"""Whether a structured-output constraint compiles: the API's stand-in for the engine's check.

Same signature as ``mstar.engine.structured_output.check_structured_output`` (the engine's grammar
work); it compiles the grammar with xgrammar (no tokenizer needed) and raises ValueError with
xgrammar's reason.
"""

from __future__ import annotations

import functools
import re

from mstar.engine.sampling_params import StructuredOutput

_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")  # "[07:57:36] /project/cpp/x.cc:94: "


def check_structured_output(spec: StructuredOutput) -> None:
    error = _compile_error(spec.kind, spec.spec)
    if error is not None:
        raise ValueError(error)


@functools.lru_cache(maxsize=256)
def _compile_error(kind: str, spec: str) -> str | None:
    import xgrammar

    compile_ = {"json_schema": xgrammar.Grammar.from_json_schema,
                "regex": xgrammar.Grammar.from_regex,
                "grammar": xgrammar.Grammar.from_ebnf}.get(kind)
    if compile_ is None:
        return None
    try:
        compile_(spec)
    except Exception as exc:  # xgrammar raises RuntimeError with its parser's message
        return _LOG_PREFIX.sub("", str(exc)).strip()
    return None
