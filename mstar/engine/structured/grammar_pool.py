"""Grammar compilation off the step loop: a bounded pool, a time budget, and lockstep admission.

The step-loop thread never checks or compiles a grammar. ``GrammarCompilePool.start`` only queues
the work; a pool thread then checks the constraint's bounds (``mstar.engine.structured.grammar_limits``) and
its syntax, and compiles it with xgrammar. Once per engine step ``admit`` decides, for every
request still waiting for its grammar: admitted (compiled), failed (a 400 naming the field) or out
of time (past ``grammar_compile_timeout_s`` since ``start``: a 408, and a compile not yet begun is
cancelled). An abort cancels its compile if it is still queued.

Why a budget and not an interruption: xgrammar compiles in C++ and holds no cancellation point, so
a compile that has begun runs to its end in its thread. What bounds that time is the pre-check:
every constraint is first held to the size, nesting, enum and regex bounds, which is what makes a
compile cheap (the 1.2 MB, 100k-entry enum that took minutes is refused in milliseconds). The
budget then bounds what a request can wait, queueing included, and a timed-out request's queued
compile never starts, so a burst of slow schemas cannot hold the pool for later requests.

xgrammar's compile cache is bounded (``grammar_cache_mb``, its ``cache_limit_bytes``): a stream of
distinct schemas evicts old grammars instead of growing the worker without end.

Tensor parallelism: every rank compiles in its own pool, but ranks must admit a request in the same
step. So rank 0 decides, and broadcasts its decisions over a gloo group of the engine's own (made
when the engine is, on every rank in the same order). A rank told "admitted" waits for the rest of
its own compile, which began in the same step as rank 0's; only then is a request scheduled. The
broadcast runs only in steps where a request waits for its grammar, on the same set on every rank.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from threading import Lock

from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.sampling_params import StructuredOutput
from mstar.engine.structured.grammar_limits import GrammarLimits, check_constraint
from mstar.engine.structured.structured_output import (
    ANY_OBJECT_SCHEMA,
    REQUEST_FIELD,
    Constraint,
    check_structured_output,
    choice_grammar,
    reason,
    tokens_without_control_chars,
)

MIB = 1024 * 1024
COMPILE_THREADS = 2

Verdict = tuple[int, str] | None  # None: admitted; else (HTTP status, message)


@dataclass(frozen=True)
class GrammarBounds:
    """What the pool takes from the settings."""

    limits: GrammarLimits
    timeout_s: float
    cache_bytes: int

    @classmethod
    def from_settings(cls, settings) -> GrammarBounds:
        return cls(GrammarLimits.from_settings(settings), settings.grammar_compile_timeout_s,
                   int(settings.grammar_cache_mb * MIB))


class PendingGrammar:
    """One request's grammar. The scheduler sees it ``done()`` once admitted (not merely compiled:
    under tensor parallelism admission is a decision every rank takes in the same step)."""

    def __init__(self, spec: StructuredOutput, future: Future) -> None:
        self.spec = spec
        self.future = future
        self.started = time.monotonic()
        self.admitted = False

    def done(self) -> bool:
        return self.admitted

    def exception(self) -> BaseException | None:
        return None  # a failed grammar is never admitted: its request ends instead

    def result(self) -> Constraint:
        return self.future.result()


class GrammarCompilePool:
    """Compiles grammars for one tokenizer on a small thread pool, cached by xgrammar.

    The xgrammar compiler (its tokenizer info takes a moment to build) is made on the first
    compile, in a pool thread: an engine that never sees a constrained request never pays for it.
    ``vocab_size`` is the width of the model's logits; ``stop_token_ids`` end a grammar.
    ``parallel_size`` > 1: this engine is one rank of a tensor-parallel group (torch.distributed
    is initialised), and admission is decided by rank 0. ``executor``: where compiles run (by
    default a pool of ``COMPILE_THREADS`` threads; a test passes one that decides when, and how,
    each compile ends).
    """

    def __init__(self, tokenizer, vocab_size: int, stop_token_ids: list[int],
                 bounds: GrammarBounds, parallel_size: int = 1,
                 executor: Executor | None = None) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._stop_token_ids = stop_token_ids
        self._bounds = bounds
        self._pool = executor or ThreadPoolExecutor(COMPILE_THREADS,
                                                    thread_name_prefix="mstar-grammar")
        self._lock = Lock()
        self._compiler = None
        self._no_control = None  # bitmask row: tokens without a control character
        self._pending: dict[str, PendingGrammar] = {}  # in start order; the step thread's only
        self._group = _admission_group() if parallel_size > 1 else None

    def start(self, request_id: str, spec: StructuredOutput) -> PendingGrammar:
        """Queue the check and compile of ``spec``; nothing is done on the caller's thread."""
        pending = PendingGrammar(spec, self._pool.submit(self._compile, spec))
        self._pending[request_id] = pending
        return pending

    def check(self, spec: StructuredOutput) -> None:
        """The bounds and syntax check a compile starts with, on the caller's thread: for callers
        that want a bad constraint refused up front (``mstar.LLM``); RequestRejected naming its
        request field."""
        try:
            check_constraint(spec, self._bounds.limits)
            check_structured_output(spec)
        except ValueError as exc:
            raise RequestRejected(f"invalid field '{REQUEST_FIELD[spec.kind]}': "
                                  f"{exc}", REQUEST_FIELD[spec.kind]) from None

    def cancel(self, request_id: str) -> None:
        """The request ended (aborted): its compile is cancelled if it has not begun."""
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.future.cancel()

    def admit(self) -> list[tuple[str, RequestRejected]]:
        """Admit every waiting grammar that is ready; the requests that failed, with why."""
        if not self._pending:
            return []
        verdicts = self._verdicts() if self._rank() == 0 else None
        if self._group is not None:
            verdicts = _broadcast(verdicts, self._group)
        failed = []
        for request_id, verdict in verdicts.items():
            pending = self._pending.pop(request_id)
            if verdict is None:
                pending.future.result()  # a follower: the rest of its own compile
                pending.admitted = True
            else:
                pending.future.cancel()
                failed.append((request_id, RequestRejected(
                    verdict[1], REQUEST_FIELD[pending.spec.kind], verdict[0])))
        return failed

    def all_compiled(self) -> bool:
        return all(p.future.done() for p in self._pending.values())

    def wait_any(self, timeout_s: float) -> None:
        """Block a moment on the compiles in progress (when nothing else can run)."""
        futures = [p.future for p in self._pending.values() if not p.future.done()]
        if futures:
            wait(futures, timeout=timeout_s, return_when=FIRST_COMPLETED)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _rank(self) -> int:
        if self._group is None:
            return 0
        import torch.distributed as dist

        return dist.get_rank()

    def _verdicts(self) -> dict[str, Verdict]:
        """Rank 0's decisions for the grammars that are ready, failed or out of time."""
        now = time.monotonic()
        verdicts: dict[str, Verdict] = {}
        for request_id, pending in self._pending.items():
            field = REQUEST_FIELD[pending.spec.kind]
            future = pending.future
            if future.done():
                exc = future.exception()
                verdicts[request_id] = None if exc is None else (
                    400, f"invalid field '{field}': {reason(exc)}")
            elif now - pending.started > self._bounds.timeout_s:
                verdicts[request_id] = (408, (
                    f"the '{field}' constraint did not compile within grammar_compile_timeout_s="
                    f"{self._bounds.timeout_s:g}"))
        return verdicts

    def _compiler_for_tokenizer(self):
        import xgrammar as xgr

        with self._lock:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self._vocab_size,
                    stop_token_ids=self._stop_token_ids)
                self._no_control = tokens_without_control_chars(info, self._vocab_size)
                self._compiler = xgr.GrammarCompiler(
                    info, max_threads=min(4, os.cpu_count() or 1),
                    cache_limit_bytes=self._bounds.cache_bytes)
            return self._compiler

    def _compile(self, spec: StructuredOutput) -> Constraint:
        try:
            check_constraint(spec, self._bounds.limits)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        check_structured_output(spec)
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


def _admission_group():
    import torch.distributed as dist

    return dist.new_group(backend="gloo")


def _broadcast(verdicts: dict[str, Verdict] | None, group) -> dict[str, Verdict]:
    import torch.distributed as dist

    box = [verdicts]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]
