"""The verify gate: which rows of a step verify their drafts, and how many, so that speculation
never lowers a step's expected output tokens per second (the acceptance floor that weighs the
batch size).

A draft position is worth its chance of being emitted: the row's ``j``-th draft counts only when
drafts ``1 .. j`` are all accepted, ``p ** j`` for a row whose drafts are each accepted with
probability ``p`` (its history, ``Speculation``). It costs what one more token adds to the step
(``StepCost``, measured on this machine at this step's size) plus, for a draft model, what
drafting one token costs. The gate admits positions best first while each one's worth per second
is above the step's expected rate so far: every admitted position raises the rate, so the chosen
set never runs slower than decoding without drafts. At one stream a position is nearly free
beside a step's fixed cost, so nearly every draft passes; in a CPU batch a position costs about
what a row does, and drafts that are accepted half the time do not.

What an accepted draft saves depends on who is waiting for the row. The step's rate counts each
token at the step's cost per output: a share of its fixed cost plus one row's cost (``c``). That
holds where a row that ends sooner lets another in (a queue, clients that send again), and for
the row that ends its batch last. Rows that will end together (started together with one
budget: a batch of requests cut at ``max_tokens``) shorten the batch only if they all advance, so
a row's draft saves its share of the fixed cost only with the chance that the rows of its
remaining budget advance as far (``together``; 0 when one of them has no drafts this step), and
else only ``c``: in a batch of open-ended chat, where few rows have drafts, drafts do not pay.

A step that verifies drafts may also cost more than a plain step of as many tokens (its rows
attend several positions each). So the gate also times the two kinds apart (``plain``,
``verifying``) and drops a step's drafts when their expected rate, at the verify steps' cost, is
not above the plain step's rate.

Owned by the scheduler's thread: the step loop reports each serial step's duration with
``observe_step`` (the speculation's own thread; the overlapped loop never speculates).
"""

from __future__ import annotations

from collections.abc import Sequence

from mstar.engine.speculative.step_cost import StepCost

DRAFT_COST_MEMORY = 16  # proposals after which the draft cost is an exponential average


def worth(acceptance: float, drafts: int) -> float:
    """The tokens ``drafts`` drafts are expected to add, each accepted with probability
    ``acceptance`` (after the ones before it)."""
    return sum(acceptance**j for j in range(1, drafts + 1))


def gains(acceptance: Sequence[float], most: Sequence[int], share: float,
          together: Sequence[Sequence[float]] | None = None) -> list[list[float]]:
    """Per row, the tokens' worth of each of its ``most`` drafts: the ``j``-th is emitted with
    chance ``acceptance ** j`` and then saves a row (``1 - share`` of a token's cost) plus, with
    chance ``together[i][j - 1]`` (default 1), its share of the fixed cost (``share``)."""
    return [[p**j * (1.0 - share + share * (1.0 if together is None else together[i][j - 1]))
             for j in range(1, m + 1)] for i, (p, m) in enumerate(zip(acceptance, most, strict=True))]


def together(acceptance: Sequence[float], most: Sequence[int], budgets: Sequence[int],
             idle: dict[int, int]) -> list[list[float]]:
    """Per row ``i`` and draft ``j``: the chance that every other row of row ``i``'s remaining
    budget advances ``j`` too this step; ``idle[b]``: rows of budget ``b`` without drafts."""
    out = []
    for i, (budget, m) in enumerate(zip(budgets, most, strict=True)):
        others = [(p, n) for k, (p, n, b) in enumerate(zip(acceptance, most, budgets, strict=True))
                  if k != i and b == budget]
        chances = []
        for j in range(1, m + 1):
            chance = 0.0 if idle.get(budget) else 1.0
            for p, n in others:
                chance *= p**j if n >= j else 0.0
            chances.append(chance)
        out.append(chances)
    return out


def admit(row_gains: Sequence[Sequence[float]], outputs: float, seconds: float,
          per_position: float) -> list[int]:
    """How many drafts each row verifies (a prefix of its drafts, whose worth ``row_gains[i]``
    falls with ``j``) in a step that without drafts emits ``outputs`` tokens in ``seconds``,
    where each draft position adds ``per_position`` seconds."""
    positions = sorted(((gain, i, j) for i, row in enumerate(row_gains)
                        for j, gain in enumerate(row)), key=lambda g: (-g[0], g[1], g[2]))
    lengths = [0] * len(row_gains)
    for gain, i, _ in positions:  # each row's positions in order: the gain falls with j
        if gain * seconds <= outputs * per_position:  # gain/cost <= rate: later ones too
            break
        lengths[i] += 1
        outputs += gain
        seconds += per_position
    return lengths


class VerifyGate:
    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # MSTAR_SPECULATIVE_GATE: off verifies every proposed draft
        self.cost = StepCost()  # every step: the cost of one more position
        self.plain = StepCost()  # steps that verified no draft
        self.verifying = StepCost()  # steps that verified drafts
        self.draft_s = 0.0  # seconds to draft one token (the draft model), 0 until measured
        self.draft_runs = 0

    def observe_step(self, tokens: int, seconds: float, verified: bool = False) -> None:
        """A serial step computed ``tokens`` tokens (drafts included) in ``seconds`` (proposing
        excluded); ``verified``: it verified drafts."""
        self.cost.observe(tokens, seconds)
        (self.verifying if verified else self.plain).observe(tokens, seconds)

    def observe_drafts(self, drafts: int, seconds: float) -> None:
        """The draft model drafted ``drafts`` tokens in ``seconds``."""
        if drafts:
            self.draft_runs += 1
            self.draft_s += (seconds / drafts - self.draft_s) / min(self.draft_runs,
                                                                    DRAFT_COST_MEMORY)

    def lengths(self, acceptance: Sequence[float], most: Sequence[int], step_tokens: int,
                step_outputs: float, together: Sequence[Sequence[float]] | None = None
                ) -> list[int]:
        """Drafts each candidate row verifies in a step that, without drafts, computes
        ``step_tokens`` tokens and emits ``step_outputs`` tokens (expected); ``together``: see
        ``gains`` (None: every row's draft saves its whole cost per output). Before two step
        sizes were measured, all of them (the steps that follow measure the cost). With the gate
        off, all of them always."""
        if not self.enabled:
            return list(most)
        if together is not None and not any(row and row[0] for row in together):
            return [0] * len(most)  # each draft saves at most a row's cost, which it adds
        line = self.cost.near(step_tokens)
        if line is None:
            return list(most)
        # a token's cost per output: a share of the fixed cost plus a row's (per_token)
        spent = line.seconds
        share = 1.0 - min(1.0, line.per_token * step_outputs / spent) if spent > 0 else 0.0
        row_gains = gains(acceptance, most, share, together)
        lengths = admit(row_gains, step_outputs, line.seconds, line.per_token + self.draft_s)
        gain = sum(sum(row[:n]) for row, n in zip(row_gains, lengths, strict=True))
        return lengths if self._pays(gain, sum(lengths), step_tokens, step_outputs) \
            else [0] * len(most)

    def _pays(self, gain: float, drafts: int, step_tokens: int, step_outputs: float) -> bool:
        """``drafts`` admitted drafts worth ``gain`` tokens run faster, at the verify steps'
        measured cost, than the plain step (True while either kind is unmeasured near this
        size)."""
        plain = self.plain.near(step_tokens)
        verifying = self.verifying.near(step_tokens + drafts)
        if not drafts or plain is None or verifying is None:
            return True
        with_drafts = verifying.seconds + self.draft_s * drafts
        return (step_outputs + gain) / with_drafts > step_outputs / plain.seconds
