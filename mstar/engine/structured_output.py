"""Structured output with xgrammar: check a constraint, compile it off the hot path, mask logits.

- ``check_structured_output``: needs no tokenizer (the API layer calls it for a 400).
- ``GrammarCompilePool``: compiles on a small thread pool; the engine starts it at ``add_request``
  and the scheduler admits the request once its grammar is ready, so a slow schema never stalls
  the running batch. xgrammar's ``GrammarCompiler`` caches by (kind, spec), so a repeated schema
  compiles once.
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
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from threading import Lock

import torch

from mstar.engine.errors import RequestRejected
from mstar.engine.sampling_params import StructuredOutput

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
        return f"invalid {kind}: {_reason(exc)}"
    return None


def _reason(exc: Exception) -> str:
    """xgrammar's message without its C++ source-location prefix."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("[") and ": " in text else text


class GrammarCompilePool:
    """Compiles grammars for one tokenizer on a small thread pool, cached by xgrammar.

    The xgrammar compiler (its tokenizer info takes a moment to build) is made on the first
    compile, in a pool thread: an engine that never sees a constrained request never pays for it.
    ``vocab_size`` is the width of the model's logits; ``stop_token_ids`` end a grammar.
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int],
                 workers: int = 2) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = stop_token_ids
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="mstar-grammar")
        self._lock = Lock()
        self._compiler = None
        self._no_control = None  # bitmask row: tokens without a control character

    def start(self, spec: StructuredOutput, wait: bool = False) -> Future:
        """Check ``spec`` now (RequestRejected naming its request field), then compile it in the
        background: a Future of its ``Constraint``.

        ``wait``: return only once it is compiled (RequestRejected if that fails). Tensor-parallel
        ranks need it: each schedules on its own, so each must admit the request in the same step.
        """
        try:
            check_structured_output(spec)
        except ValueError as exc:
            raise RequestRejected(str(exc), REQUEST_FIELD[spec.kind]) from None
        future = self._pool.submit(self._compile, spec)
        if wait and future.exception() is not None:
            raise RequestRejected(f"invalid {spec.kind}: {_reason(future.exception())}",
                                  REQUEST_FIELD[spec.kind])
        return future

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compiler_for_tokenizer(self):
        import xgrammar as xgr

        with self._lock:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self._vocab_size,
                    stop_token_ids=self._stop_token_ids)
                self._no_control = _tokens_without_control_chars(info, self._vocab_size)
                self._compiler = xgr.GrammarCompiler(info, max_threads=min(4, os.cpu_count() or 1))
            return self._compiler

    def _compile(self, spec: StructuredOutput) -> Constraint:
        compiler = self._compiler_for_tokenizer()
        if spec.kind in ("json_object", "json_schema"):
            schema = ANY_OBJECT_SCHEMA if spec.kind == "json_object" else spec.spec
            return Constraint(compiler.compile_json_schema(schema, any_whitespace=False),
                              self._no_control)
        if spec.kind == "regex":
            return Constraint(compiler.compile_regex(spec.spec))
        if spec.kind == "choice":
            return Constraint(compiler.compile_grammar(choice_grammar(spec.choices)))
        return Constraint(compiler.compile_grammar(spec.spec))


def _tokens_without_control_chars(info, vocab_size: int) -> torch.Tensor:
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
