"""Structured output with xgrammar: check a constraint, compile it off the hot path, mask logits.

- ``check_structured_output``: needs no tokenizer (the API layer calls it for a 400).
- compiling happens in ``mstar.engine.structured.grammar_pool`` (off the step loop, bounded in time and
  cache memory); the scheduler admits a request once its grammar is ready.
- The token bitmask of each constrained row is filled and applied by the sampler
  (``mstar.engine.sampling.grammar``).

JSON is generated compact (``any_whitespace=False``: one space after ``,`` and ``:``, none
elsewhere): with free whitespace a small model can fill its budget with newlines. So no raw control
character (U+0000..U+001F) is ever valid in it, and JSON rows also mask every token holding one:
xgrammar's strings with maxLength admit them (mlc-ai/xgrammar#800), which ``json.loads`` rejects.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import torch

from mstar.engine.request.sampling_params import StructuredOutput

ANY_OBJECT_SCHEMA = '{"type": "object"}'  # json_object: any JSON object

# The OpenAI request field each kind comes from, to name it in a 400.
REQUEST_FIELD = {"json_object": "response_format", "json_schema": "response_format",
                 "regex": "guided_regex", "choice": "guided_choice", "grammar": "guided_grammar"}


@dataclass(frozen=True)
class Constraint:
    """A compiled grammar, and for JSON the bitmask row of tokens free of control characters."""

    grammar: object  # xgrammar.CompiledGrammar
    allowed: torch.Tensor | None = None


def choice_grammar(choices: list[str]) -> str:
    """EBNF accepting exactly one of ``choices`` (JSON string escapes are EBNF's too)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def check_structured_output(spec: StructuredOutput) -> None:
    """Raise ValueError naming the problem if ``spec`` cannot be compiled to a grammar.

    Cached by the spec: the API server and the engine both check every request's constraint.
    """
    problem = _problem(spec.kind, spec.spec, tuple(spec.choices))
    if problem is not None:
        raise ValueError(problem)


@functools.lru_cache(maxsize=256)
def _problem(kind: str, spec: str, choices: tuple[str, ...]) -> str | None:
    import xgrammar as xgr

    try:
        if kind == "json_schema":
            xgr.Grammar.from_json_schema(spec, any_whitespace=False)
        elif kind == "regex":
            xgr.Grammar.from_regex(spec)
        elif kind == "choice":
            xgr.Grammar.from_ebnf(choice_grammar(list(choices)))
        elif kind == "grammar":
            xgr.Grammar.from_ebnf(spec)
    except Exception as exc:  # noqa: BLE001 - xgrammar raises RuntimeError, ValueError, ...
        return f"invalid {kind}: {reason(exc)}"
    return None


def reason(exc: Exception) -> str:
    """xgrammar's message without its C++ source-location prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("[") and ": " in text else text


def tokens_without_control_chars(info, vocab_size: int) -> torch.Tensor:
    """A bitmask row allowing every token but those whose text holds a byte below 0x20."""
    import xgrammar as xgr

    row = xgr.allocate_token_bitmask(1, vocab_size)
    stops = set(info.stop_token_ids)
    banned = [i for i, text in enumerate(info.decoded_vocab)
              if i not in stops and any(b < 0x20 for b in text)]
    bits = torch.zeros(row.shape[1] * 32, dtype=torch.int64)
    bits[banned] = 1
    words = (bits.view(-1, 32) << torch.arange(32)).sum(-1)  # bit j of word w: token 32 w + j
    words = torch.where(words >= 2**31, words - 2**32, words)  # as int32 (two's complement)
    row[0] &= ~words.to(torch.int32)
    return row[0]
