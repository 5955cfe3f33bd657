"""A prompt being prefilled beside decoding requests takes at most its share of their time
(MSTAR_PREFILL_SHARE_BESIDE_DECODES, ``schedule.prefill_share``), and still finishes.

No model: the scheduler's steps run on a simulated machine whose step cost is a fixed part, a
part per decoding row and, per prompt chunk, a part for its context (gathering the K/V) plus one
per token that grows with the context (attention). A fake clock is the scheduler's clock, so the
step durations it learns from are the machine's."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.prefill_share import (
    MIN_SHARED_CHUNK,
    PrefillShare,
    context_key,
    prefill_share,
)
from mstar.engine.schedule.scheduler import Scheduler
from mstar.engine.schedule.scheduler_output import RunnerOutput, SchedulerOutput
from mstar.settings.knobs.engine import PREFILL_SHARE_ON_CPU

FAST = settings(max_examples=25, deadline=None, derandomize=True)
CAP = 256  # MSTAR_MAX_PREFILL_CHUNK_TOKENS
BLOCK = 16


@dataclass(frozen=True)
class Machine:
    fixed: float  # seconds of any step
    per_decode: float  # seconds per decoding row
    per_context: float  # seconds per position a chunk's context holds (its K/V gather)
    per_token: float  # seconds per chunk token
    per_token_context: float  # seconds per chunk token per position it attends to (its mean)

    def decodes(self, out: SchedulerOutput) -> float:
        return self.fixed + self.per_decode * sum(1 for r in out.rows if r.num_tokens == 1)

    def cost(self, out: SchedulerOutput) -> float:
        chunks = [r for r in out.rows if r.num_tokens > 1]
        return self.decodes(out) + sum(
            self.per_context * r.end + r.num_tokens * (
                self.per_token + self.per_token_context * (r.start + r.end) / 2) for r in chunks)


@dataclass
class Sim:
    machine: Machine
    share: float
    now: list[float] = field(default_factory=lambda: [0.0])
    steps: list[tuple[SchedulerOutput, float]] = field(default_factory=list)
    load: float = 1.0  # what every step costs, times the machine's cost (another tenant)
    long: Sequence | None = None  # the prompt prefilled beside the decodes

    def __post_init__(self) -> None:
        bm = BlockManager(4096, BLOCK, False)
        self.sched = Scheduler(bm, 64, 8192, prefill_cap=CAP,
                               share=PrefillShare(self.share, clock=lambda: self.now[0]))

    def add(self, prompt_len: int, max_tokens: int, pooling: bool = False) -> Sequence:
        params = SamplingParams(max_tokens=max_tokens, pooling="last" if pooling else None,
                                ignore_eos=True)
        seq = Sequence(f"r{len(self.sched.live)}", [7] * prompt_len, params, generator=None)
        self.sched.add(seq)
        return seq

    def step(self) -> SchedulerOutput:
        out = self.sched.schedule()
        assert out is not None
        seconds = self.load * self.machine.cost(out)
        self.now[0] += seconds
        tokens = [1] * sum(1 for r in out.rows if r.samples)
        self.sched.update(out, RunnerOutput(tokens), _at_length)
        self.steps.append((out, seconds))
        return out


def _at_length(seq: Sequence, token: int) -> str | None:
    if seq.params.pooling is not None or seq.num_output_tokens >= seq.params.max_tokens:
        return "length"
    return None


machines = st.builds(
    Machine,
    fixed=st.floats(0.005, 0.05),
    per_decode=st.floats(0.0, 0.005),
    per_context=st.floats(0.0, 4e-6),
    per_token=st.floats(1e-4, 2e-3),
    per_token_context=st.floats(0.0, 5e-7),
)


def _least(machine: Machine, context: int) -> float:
    """What a least shared chunk adds to a step at ``context``."""
    return machine.per_context * context + MIN_SHARED_CHUNK * (
        machine.per_token + machine.per_token_context * context)


def _shared_run(machine: Machine, share: float, prompt_len: int, decoders: int,
                slows_at: int = -1) -> Sim:
    """``decoders`` requests decoding (started first) while a long prompt comes and is
    prefilled; stepped until the prompt is done (within three times the steps its share needs,
    when it has one). From step ``slows_at`` on, the machine is twice as slow."""
    sim = Sim(machine, share)
    for _ in range(decoders):
        sim.add(8, 100_000)
    sim.step()
    sim.long = sim.add(prompt_len, 1, pooling=True)
    decode_s = machine.fixed + machine.per_decode * decoders
    needs = prompt_len / MIN_SHARED_CHUNK * _least(machine, prompt_len) / (share * decode_s) \
        if share else prompt_len
    for i in range(int(6 * needs) + 100):
        if sim.long.is_finished:
            return sim
        sim.load = 2.0 if i == slows_at else sim.load
        sim.step()
    raise AssertionError("the prompt did not finish beside the decodes in the steps its share "
                         "pays for")


@FAST
@given(machine=machines, share=st.floats(0.1, 2.0), prompt_len=st.integers(600, 4000),
       decoders=st.integers(1, 4))
def test_a_prompt_beside_decodes_takes_its_share_of_their_time_and_finishes(
        machine, share, prompt_len, decoders):
    sim = _shared_run(machine, share, prompt_len, decoders)
    shared = [(out, s) for out, s in sim.steps[2:]  # after its first (unshared) chunk
              if any(r.num_tokens == 1 for r in out.rows)]
    decode_s = sum(machine.decodes(out) for out, _ in shared)
    added = sum(s - machine.decodes(out) for out, s in shared)
    biggest = max(s - machine.decodes(out) for out, s in shared)
    # What the prompt took beside the decodes: its share, plus at most one chunk in debt...
    assert added <= share * decode_s + biggest + 1e-9
    # No step pays for more than its share since the last chunk (the fit's error aside), or a
    # least chunk: one decode step never waits for a whole chunk at full speed. And the prompt
    # waits only while its share does not pay for a least chunk (or for the last chunk's debt).
    earned, chunks, last = 0.0, 0, 0.0
    for out, seconds in shared:
        earned += share * machine.decodes(out)
        chunk = [r for r in out.rows if r.num_tokens > 1]
        if not chunk:
            continue
        chunks += 1
        added = seconds - machine.decodes(out)
        least = _least(machine, chunk[0].end)
        assert added <= 1.5 * earned + least
        if chunks > 2:  # after the first measurements
            assert earned <= 1.5 * least + 0.5 * last + 2 * share * machine.decodes(out)
        earned, last = 0.0, added


@FAST
@given(machine=machines, share=st.floats(0.1, 2.0), prompt_len=st.integers(600, 4000),
       decoders=st.integers(1, 4), slows_at=st.integers(3, 60))
def test_a_machine_the_fit_lags_behind_still_gives_the_prompt_its_share_only(
        machine, share, prompt_len, decoders, slows_at):
    """Each chunk's measured cost replaces its prediction in the credit, so a fit that lags
    behind the machine (it slows down) does not let the prompt take more than its share."""
    sim = _shared_run(machine, share, prompt_len, decoders, slows_at)
    shared = [(out, s, 2.0 if i >= slows_at else 1.0)
              for i, (out, s) in enumerate(sim.steps[2:], start=2)
              if any(r.num_tokens == 1 for r in out.rows)]
    decode_s = sum(load * machine.decodes(out) for out, _, load in shared)
    added = sum(s - load * machine.decodes(out) for out, s, load in shared)
    biggest = max(s - load * machine.decodes(out) for out, s, load in shared)
    assert added <= share * decode_s + biggest + 1e-9


@FAST
@given(machine=machines, share=st.floats(0.1, 2.0), prompt_len=st.integers(600, 4000),
       decoders=st.integers(1, 4))
def test_every_decoding_request_runs_every_step(machine, share, prompt_len, decoders):
    sim = _shared_run(machine, share, prompt_len, decoders)
    for out, _ in sim.steps[1:]:  # after the decoding requests' own prompts
        assert sum(1 for r in out.rows if r.num_tokens == 1) == decoders


@FAST
@given(machine=machines, share=st.floats(0.0, 2.0), prompt_len=st.integers(300, 3000))
def test_with_nothing_decoding_a_prompt_runs_at_full_speed(machine, share, prompt_len):
    sim = Sim(machine, share)
    sim.add(prompt_len, 1, pooling=True)
    while sim.sched.has_unfinished():
        sim.step()
    chunks = [out.rows[0].num_tokens for out, _ in sim.steps]
    assert chunks == [CAP] * (prompt_len // CAP) + ([prompt_len % CAP] if prompt_len % CAP else [])


@FAST
@given(machine=machines, prompt_len=st.integers(300, 3000), decoders=st.integers(1, 4))
def test_share_zero_is_todays_chunking(machine, prompt_len, decoders):
    sim = _shared_run(machine, 0.0, prompt_len, decoders)
    chunks = [r.num_tokens for out, _ in sim.steps for r in out.rows
              if r.seq_no == sim.long.seq_no]
    assert chunks == [CAP] * (prompt_len // CAP) + ([prompt_len % CAP] if prompt_len % CAP else [])


def test_auto_shares_on_cpu_only():
    assert prefill_share("auto", "cpu") == PREFILL_SHARE_ON_CPU > 0
    assert prefill_share("auto", "cuda") == 0.0
    assert prefill_share(0.25, "cuda") == 0.25


@given(st.integers(0, 2**20))
def test_context_keys_are_few_and_close_below(context):
    key = context_key(context)
    assert key <= context < key + max(64, context // 8 + 1)
    assert context_key(key) == key
