"""The verify gate (``mstar.engine.speculative.gate``): a step verifies drafts only where their
expected tokens pay for the positions they add, at this step's size on this machine, so
speculation never slows a batch of open-ended chat; the step cost it learns from the engine's own
steps (``step_cost``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.speculative.gate import VerifyGate, admit, gains, together, worth
from mstar.engine.speculative.ngram import NgramIndex
from mstar.engine.speculative.step_cost import Line, StepCost
from mstar.engine.speculative.tally import PRIOR_ACCEPTANCE, RecentAcceptance, Tally

CHAT = [0.47] * 8  # open-ended chat: about half the drafts accepted


def _gate(step_seconds) -> VerifyGate:
    gate = VerifyGate()
    for tokens in range(1, 65):
        gate.observe_step(tokens, step_seconds(tokens))
    return gate


def _rate(acceptance, lengths, outputs, seconds, per_position) -> float:
    gain = sum(map(worth, acceptance, lengths))
    return (outputs + gain) / (seconds + per_position * sum(lengths))


def test_a_batch_where_a_position_costs_a_row_verifies_no_chat_drafts():
    gate = _gate(lambda tokens: 0.020 + 0.010 * tokens)  # compute bound: a token costs a row
    assert gate.lengths(CHAT, [4] * 8, step_tokens=8, step_outputs=8) == [0] * 8
    # drafts that are nearly always accepted still pay (input-grounded text)
    assert all(gate.lengths([0.95] * 8, [4] * 8, step_tokens=8, step_outputs=8))


def test_nearly_free_positions_verify_the_drafts():
    gate = _gate(lambda tokens: 0.070 + 0.0005 * tokens)  # memory bound: the weights dominate
    assert gate.lengths(CHAT[:1], [4], step_tokens=1, step_outputs=1) == [4]
    assert min(gate.lengths(CHAT, [4] * 8, step_tokens=8, step_outputs=8)) >= 3


def test_one_stream_verifies_what_a_batch_holds_back():
    """A CPU step: a few tokens nearly free, a batch of them compute bound."""
    gate = _gate(lambda tokens: 0.070 + 0.001 * tokens if tokens <= 6 else 0.010 * tokens)
    assert gate.lengths([0.6], [4], step_tokens=1, step_outputs=1) == [4]
    assert gate.lengths([0.6] * 8, [4] * 8, step_tokens=8, step_outputs=8) == [0] * 8


def test_verify_steps_dearer_than_plain_ones_hold_the_drafts_back():
    """Nearly free positions, but a step that verifies costs twice what a plain one of as many
    tokens (on CPU the plain decode step takes the one-call decoder stack): chat drafts at 8
    rows do not pay; at one stream grounded drafts still do."""
    gate = VerifyGate()
    for tokens in range(1, 41):
        gate.observe_step(tokens, 0.070 + 0.0005 * tokens)
        gate.observe_step(tokens, 2 * (0.070 + 0.0005 * tokens), verified=True)
    assert gate.lengths(CHAT, [4] * 8, step_tokens=8, step_outputs=8) == [0] * 8
    assert gate.lengths([0.85], [4], step_tokens=1, step_outputs=1) == [4]
    same = VerifyGate()
    for tokens in range(1, 41):
        same.observe_step(tokens, 0.070 + 0.0005 * tokens)
        same.observe_step(tokens, 0.070 + 0.0005 * tokens, verified=True)
    assert min(same.lengths(CHAT, [4] * 8, step_tokens=8, step_outputs=8)) >= 3


def test_a_draft_models_cost_counts():
    gate = _gate(lambda tokens: 0.070 + 0.0005 * tokens)
    gate.observe_drafts(2, 0.4)  # 0.2 s a draft: more than a step
    assert gate.lengths([0.9], [4], step_tokens=1, step_outputs=1) == [0]


def test_unmeasured_cost_verifies_everything():
    gate = VerifyGate()
    gate.observe_step(8, 0.1)  # one step size: no slope yet
    assert gate.lengths(CHAT, [1, 2, 3, 4, 0, 1, 2, 3], 8, 8) == [1, 2, 3, 4, 0, 1, 2, 3]


def test_step_cost_is_local_and_follows_the_machine():
    cost = StepCost()
    for _ in range(3):
        for tokens in range(1, 41):
            cost.observe(tokens, 0.070 + 0.001 * tokens if tokens <= 6 else 0.010 * tokens)
    assert cost.near(1).per_token < 0.004 and cost.near(16).per_token == pytest.approx(0.01)
    assert cost.near(16).seconds == pytest.approx(0.16)
    for _ in range(40):  # the machine got twice as slow at 16 tokens
        cost.observe(16, 0.32)
    assert cost.near(16).seconds > 0.2


positions = st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 4), st.floats(0.0, 1.0)),
                     min_size=1, max_size=4)


@given(rows=positions, outputs=st.integers(1, 8), seconds=st.floats(0.01, 1.0),
       per_position=st.floats(0.0, 0.5), share=st.floats(0.0, 1.0))
def test_the_gate_admits_the_fastest_drafts_never_slower_than_none(rows, outputs, seconds,
                                                                  per_position, share):
    """The admitted drafts' expected tokens per second are at least decoding's without drafts,
    and at least those of any other choice of draft lengths (each row a prefix of its drafts),
    whatever share of a token's cost a draft saves only when its rows advance together."""
    acceptance, most = [p for p, _, _ in rows], [m for _, m, _ in rows]
    ends = [[t**j for j in range(1, m + 1)] for _, m, t in rows]
    row_gains = gains(acceptance, most, share, ends)
    lengths = admit(row_gains, outputs, seconds, per_position)
    assert all(0 <= n <= m for n, m in zip(lengths, most, strict=True))

    def rate(choice) -> float:
        gain = sum(sum(row[:n]) for row, n in zip(row_gains, choice, strict=True))
        return (outputs + gain) / (seconds + per_position * sum(choice))

    assert rate(lengths) >= outputs / seconds * (1 - 1e-9)
    for other in itertools.product(*(range(m + 1) for m in most)):
        assert rate(lengths) >= rate(other) * (1 - 1e-9)


def test_rows_that_end_together_pay_only_when_they_all_advance():
    """Eight rows of one budget (a batch sent at once, cut at max_tokens): the batch ends a
    step sooner only if all eight advance, so chat drafts on three of them save a row's cost,
    not the step's; where every row drafts grounded text, the first drafts still pay. Rows of
    different budgets (requests that came one by one) keep the whole saving."""
    gate = _gate(lambda tokens: 0.050 + 0.003 * tokens)  # a fixed cost, then a row's
    budgets, idle = [40] * 3, {40: 5}
    ends = together([0.6] * 3, [4] * 3, budgets, idle)
    assert ends == [[0.0] * 4] * 3
    assert gate.lengths([0.6] * 3, [4] * 3, step_tokens=8, step_outputs=8, together=ends) == [0] * 3
    assert VerifyGate().lengths([0.6] * 3, [4] * 3, 8, 8, together=ends) == [0] * 3  # unmeasured
    apart = together([0.6] * 3, [4] * 3, [40, 41, 42], {40: 0, 41: 0, 42: 0})
    assert min(gate.lengths([0.6] * 3, [4] * 3, 8, 8, together=apart)) >= 1
    grounded = together([0.9] * 8, [4] * 8, [40] * 8, {40: 0})
    assert grounded[0][0] == pytest.approx(0.9**7)
    assert min(gate.lengths([0.9] * 8, [4] * 8, 8, 8, together=grounded)) >= 1


class _Cost:
    """A step cost where a position costs ``per_token`` (1.0: what a row does, 10.0: ten);
    records the steps it is told of."""

    def __init__(self, per_token: float) -> None:
        self.per_token = per_token
        self.steps: list[int] = []

    def observe(self, tokens: int, seconds: float) -> None:
        self.steps.append(tokens)

    def near(self, tokens: int) -> Line:
        return Line(float(tokens), self.per_token)


def test_the_engine_holds_back_drafts_that_do_not_pay(tiny_model_dir, make_engine, run,
                                                      tiny_tokenizer):
    """The scheduler asks the gate every step and the step loop tells it each step's tokens.
    Where a position costs ten rows, greedy requests verify no drafts, and the output is what
    it is where they are free; a seeded sampled request verifies its drafts either way, so its
    output does not depend on the gate's timings."""
    prompt = tiny_tokenizer.encode("one two three four. one two three four. one two")
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    requests = {f"r{i}": (prompt, greedy) for i in range(3)} | {
        "seeded": (prompt, SamplingParams(temperature=0.3, top_p=0.9, seed=3, max_tokens=16))}
    outputs, stats = [], []
    for per_token in (10.0, 0.0):
        engine = make_engine(tiny_model_dir("llama"), speculative_method="ngram",
                             speculative_min_acceptance=0.0)
        cost = engine.speculation.gate.cost = _Cost(per_token)
        outputs.append({r: o["token_ids"] for r, o in run(engine, requests).items()})
        stats.append(engine.speculation.stats)
        assert cost.steps[0] == 4 * len(prompt)  # the prefill, then the decodes: one token a
        assert (len(cost.steps) == 16) == bool(per_token)  # step, or fewer steps with drafts
    assert outputs[0] == outputs[1]
    assert stats[0].held > 0 and stats[1].held == 0
    assert 0 < stats[0].proposed < stats[1].proposed  # the seeded request's drafts


def test_a_new_requests_prior_is_the_recent_acceptance():
    """Before its own history, a request is expected to accept like the recent requests (all
    of them, an exponential average), not like a fixed hope: chat among chat requests."""
    recent = RecentAcceptance()
    assert recent.prior() == PRIOR_ACCEPTANCE
    for _ in range(200):
        recent.add(accepted=1, rejected=True)  # one accepted of two tried
    assert recent.prior() == pytest.approx(0.5, abs=0.01)
    for _ in range(300):
        recent.add(accepted=4, rejected=False)
    assert recent.prior() > 0.99  # the older requests are forgotten
    tally = Tally(NgramIndex(2, 4), 4)
    assert tally.acceptance(recent.prior()) == pytest.approx(recent.prior())
