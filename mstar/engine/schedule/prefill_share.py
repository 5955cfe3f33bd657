"""The worker's time a prompt being prefilled gets while other requests decode
(MSTAR_PREFILL_SHARE_BESIDE_DECODES).

Chunking a long prompt (``prefill_chunk``) lets the requests beside it decode between its chunks,
but every decode step still waits for the chunk in it, and a chunk costs more the longer the
context it attends to: on a 2-core CPU a 256-token chunk at 7k context is a step of about a
second, against 20 ms for a decode step. So while a step has rows to protect (requests decoding,
or a short prompt about to be admitted), a prompt that is already being prefilled (it started in
an earlier step) runs only as many tokens as its credit pays for:

- every such step earns the prompt ``share`` times the predicted cost of a decode-only step of
  the step's decoding rows (``decodes``: a ``StepCost`` fit of the decode-only steps' durations);
- a chunk costs its tokens times the predicted cost of one prompt token at its context
  (``per_token``: a ``StepCost`` fit, keyed by the chunk's context, of what each prompt token
  added to a step beside decodes); a chunk runs once the credit pays for ``MIN_SHARED_CHUNK``
  tokens (or the prompt's rest), as many tokens as the credit pays for;
- after the step, the chunk's measured cost replaces the prediction in the credit, so over time
  the prompt takes ``share`` of the decoding rows' time whatever the fit's error: a decode then
  takes at most ``1 + share`` times as long as alone.

With no rows to protect a prompt runs at full speed (the chunk cap only), and its credit starts
from zero. ``share`` 0 turns the rule off. Durations are measured from ``schedule`` to ``update``
of the same step, which is the step's forward in the serial loop (the CPU's); in the overlapped
loop it also counts the time the step waited, so the rule is conservative there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.scheduler_output import SchedulerOutput
from mstar.engine.speculative.step_cost import StepCost
from mstar.settings.knobs.engine import PREFILL_SHARE_ON_CPU

# Tokens: the least chunk the rule runs (a prompt's last tokens aside). A chunk of at most
# ``attention.torch_backend.TOKEN_ROWS_MAX_QUERY`` (16) tokens attends as that many decode rows,
# each reading the whole context again; a step's fixed cost per prefill row (gathering its
# context's K/V) also wants a few dozen tokens to spread over.
MIN_SHARED_CHUNK = 32
BUCKETS_PER_OCTAVE = 8  # context keys of the per-token fit: ~8 bins per doubling of the context
MIN_BUCKET = 64  # tokens: the finest context key


def prefill_share(setting: float | str, device_type: str) -> float:
    """MSTAR_PREFILL_SHARE_BESIDE_DECODES as a number: ``auto`` shares on CPU only, where a
    chunk's step is long beside a decode step (on CUDA, a chunk's step is short: 0, off)."""
    if setting != "auto":
        return float(setting)
    return PREFILL_SHARE_ON_CPU if device_type == "cpu" else 0.0


def context_key(context: int) -> int:
    """The per-token fit's bin for a chunk whose middle is at ``context``: bins grow with it
    (about ``BUCKETS_PER_OCTAVE`` per doubling), so a server's bins stay few."""
    width = max(MIN_BUCKET, (1 << max(context.bit_length() - 1, 0)) // BUCKETS_PER_OCTAVE)
    return context // width * width


def protected_rows(running: list[Sequence], waiting: Sequence | None, cap: int) -> int:
    """Rows a prompt being prefilled shares the worker with: the decoding requests, and
    ``waiting`` (the next request to admit, if there is a seat) when its prompt fits in one
    chunk of ``cap`` tokens."""
    decoding = sum(1 for seq in running if len(seq) - seq.num_computed_tokens == 1)
    return decoding + (waiting is not None and len(waiting) <= cap)


def predicted(fit: StepCost, key: int) -> float | None:
    """The fit's seconds at ``key``: its local line, else its nearest bin (one bin only), else
    None (nothing measured yet)."""
    line = fit.near(key)
    if line is not None:
        return line.seconds
    if not fit.bins:
        return None
    return fit.bins[min(fit.bins, key=lambda k: abs(k - key))].seconds


@dataclass(frozen=True)
class _Plan:
    """What a step was issued with: its decoding rows, its shared chunk (if any) and when."""

    decodes: int
    tokens: int  # the shared chunk's tokens; 0: none
    key: int  # the shared chunk's context key
    predicted: float  # the seconds the credit paid for it
    clean: bool  # only decodes besides the shared chunk: its duration teaches the fits
    issued: float


class PrefillShare:
    """The credit, the two fits and the plans of the steps in flight. Owned by the scheduler
    (its thread): ``begin`` and ``chunk`` while it builds a fresh step, ``issued`` once built,
    ``done`` when the step's output is applied."""

    def __init__(self, share: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.share = share  # 0: off
        self.clock = clock
        self.decodes = StepCost()  # decode-only steps: seconds by decoding rows
        self.per_token = StepCost()  # seconds a prompt token adds beside decodes, by context key
        self.credit = 0.0  # seconds the prompts being prefilled may still take beside decodes
        self.earning: float | None = None  # the step being built: what its rows' share pays
        self.asked = False  # a prompt asked for its share in the step being built
        self.pending: tuple[int, int, float] | None = None  # its chunk: seq_no, key, s/token
        self.plans: dict[SchedulerOutput, _Plan] = {}

    def begin(self, protected: int) -> bool:
        """A fresh step with ``protected`` rows to protect (decoding rows, plus a short prompt
        about to be admitted): True when prompt chunks are to be shared. The credit is earned
        only while a prompt waits for it: it restarts from zero after a step without one."""
        if not self.asked:
            self.credit = 0.0
        self.asked = False
        self.pending = None
        if self.share <= 0 or not protected:
            return False
        decode_s = predicted(self.decodes, protected)  # None: no chunk runs; the step measures
        self.earning = None if decode_s is None else self.share * decode_s
        return True

    def chunk(self, seq: Sequence, n: int, whole_image_runs: bool) -> int:
        """Tokens (0 or up to ``n``) the prompt of running ``seq`` runs in a shared step: what
        the credit pays for, at least ``MIN_SHARED_CHUNK`` (or ``n`` when fewer); one shared
        chunk a step. A decode (``n`` 1) and a model's image runs that must run whole (the
        image cuts' rule) are not cut."""
        if n == 1 or (whole_image_runs and seq.images):
            return n
        if not self.asked and self.earning is not None:
            self.credit += self.earning
        self.asked = True
        if self.pending is not None or self.credit <= 0 or self.earning is None:
            return 0
        start, least = seq.num_computed_tokens, min(n, MIN_SHARED_CHUNK)
        key = context_key(start + least // 2)  # a chunk is priced at its middle's context
        per_token = predicted(self.per_token, key)
        if per_token is None:  # a first chunk at no known cost: the least, paid by all credit
            self.pending = (seq.seq_no, key, self.credit / least)
            return least
        tokens = self._affords(n, per_token)
        if tokens < least:
            return 0
        if tokens > least:  # priced again at the middle of the chunk so sized
            key = context_key(start + tokens // 2)
            per_token = max(per_token, predicted(self.per_token, key) or 0.0)
            tokens = max(least, self._affords(n, per_token))
        self.pending = (seq.seq_no, key, per_token)
        return tokens

    def _affords(self, n: int, per_token: float) -> int:
        """Tokens, up to ``n``, the credit pays for at ``per_token`` seconds each."""
        return min(n, int(self.credit / per_token)) if per_token > 0 else n

    def issued(self, out: SchedulerOutput) -> None:
        """The step was built: pay for its shared chunk (as far as it ran: an image or the
        cache may have cut it) and note what its duration will teach."""
        if self.share <= 0:
            return
        seq_no, key, per_token = self.pending or (-1, 0, 0.0)
        self.pending = None
        tokens = next((row.num_tokens for row in out.rows if row.seq_no == seq_no), 0)
        self.credit -= tokens * per_token
        decodes = sum(1 for row in out.rows if row.num_tokens == 1)
        clean = (not out.new and not out.num_drafts
                 and len(out.rows) - decodes == (1 if tokens else 0))
        self.plans[out] = _Plan(decodes, tokens, key, tokens * per_token, clean, self.clock())

    def done(self, out: SchedulerOutput) -> None:
        """The step's output is in: its duration goes into the fits, and a shared chunk's
        measured cost replaces its prediction in the credit."""
        plan = self.plans.pop(out, None)
        if plan is None or not plan.clean or not plan.decodes:
            return
        seconds = self.clock() - plan.issued
        if not plan.tokens:
            self.decodes.observe(plan.decodes, seconds)
            return
        decode_s = predicted(self.decodes, plan.decodes) or 0.0
        added = max(0.0, seconds - decode_s)
        self.per_token.observe(plan.key, added / plan.tokens)
        # A chunk runs only on credit, so the debt is at most the one chunk's cost: a stall of
        # the machine during it delays the prompt by that stall, no more.
        self.credit += plan.predicted - added
