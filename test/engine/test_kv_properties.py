"""Property tests of the KV block manager and the scheduler (no model: steps are simulated).

Random interleavings of admission, growth, prefix hits (repeated and shared prompts, prompts of
one repeated token), preemption (small caches), finishing and aborts. After every operation:

- each block's reference count equals the number of live block tables holding it;
- the free pool and the held blocks are disjoint and together are the whole cache;
- a block shared between two requests (or two logical blocks) holds the same whole prefix: the
  hash chain tells apart equal blocks with different prefixes;
- no request writes K/V into a block that another request holds, and a finished or aborted
  request's blocks stay held while a step in flight (the overlapped loop) may still write them;
- the oldest unfinished request is scheduled in every step, and no request runs while an older one
  waits (a preempted request goes back to the front of the queue).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.overlap_policy import OverlapPolicy
from mstar.engine.schedule.scheduler import Scheduler
from mstar.engine.schedule.scheduler_output import RunnerOutput, SchedulerOutput
from mstar.settings import WorkerSettings

FAST = settings(max_examples=150, deadline=None, derandomize=True)


# ---- a simulated engine: the scheduler's batches are "run" by writing a fake KV cache ----------

def _at_length(seq: Sequence, token: int) -> str | None:
    """The stop rule: a request ends at its max_tokens."""
    return "length" if seq.num_output_tokens >= seq.params.max_tokens else None


@dataclass
class Sim:
    bm: BlockManager
    sched: Scheduler
    kv: dict[int, tuple[int, ...]] = field(default_factory=dict)  # block -> prefix it holds
    live: list[Sequence] = field(default_factory=list)  # in arrival order
    every: dict[int, Sequence] = field(default_factory=dict)  # finished ones too, by key
    steps_without_oldest: int = 0

    @classmethod
    def make(cls, num_blocks: int, block_size: int, max_num_seqs: int, budget: int,
             prefix_caching: bool = True) -> Sim:
        bm = BlockManager(num_blocks, block_size, prefix_caching)
        policy = OverlapPolicy(WorkerSettings(max_consecutive_spec_steps=1024,
                                              spec_peek_for_fairness=False), "cpu")
        return cls(bm, Scheduler(bm, max_num_seqs, budget, policy))

    def add(self, prompt: list[int], max_tokens: int) -> None:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        seq = Sequence(f"r{len(self.live)}-{prompt}", prompt, params,
                       generator=None)
        if self.bm.blocks_needed(len(prompt) + max_tokens) > self.bm.num_blocks:
            return  # the engine rejects it up front
        self.sched.add(seq)
        self.live.append(seq)
        self.every[seq.seq_no] = seq
        self.check_prefix_hits()

    def abort(self, index: int) -> None:
        if self.live:
            seq = self.live.pop(index % len(self.live))
            self.sched.finish(seq)

    def step(self) -> None:
        oldest = self.live[0] if self.live else None
        out = self.sched.schedule()
        self.check_prefix_hits(out)
        if oldest is not None:
            assert out is not None and oldest.seq_no in out.request_keys(), \
                "the oldest unfinished request made no progress"
        self.check_fcfs()
        if out is not None:
            self.run(out)

    def overlapped_step(self, abort_index: int | None) -> None:
        """A fresh step, the next one scheduled while it runs, an abort (maybe) while both are
        in flight, then the two outputs in order: rows of requests finished meanwhile are wasted
        but still write, so their blocks must not be free until then."""
        out = self.sched.schedule()
        if out is None:
            return
        following = self.sched.schedule(after=out)
        if abort_index is not None:
            self.abort(abort_index)
        self.check_blocks()
        self.run(out)
        self.check_blocks()
        if following is not None:
            self.run(following)

    def run(self, out: SchedulerOutput) -> None:
        for row in out.rows:
            self.write(self.every[row.seq_no], row.start, row.end)
        for emitted in self.sched.update(out, RunnerOutput(self.sampled_tokens(out)), _at_length):
            if emitted.finish_reason is not None:
                self.live.remove(emitted.seq)

    @staticmethod
    def sampled_tokens(out: SchedulerOutput) -> list[int]:
        """The "model's" tokens: a small alphabet, for repeats and shared blocks."""
        return [(row.end + row.seq_no) % 3 + 1 for row in out.rows if row.samples]

    def write(self, seq: Sequence, start: int, end: int) -> None:
        """The forward writes K/V of positions [start, end): each touched block now holds the
        prefix up to its last written position (K/V depend on the whole prefix)."""
        bs = self.bm.block_size
        for logical in range(start // bs, -(-end // bs)):
            block = self.bm.block_ids(seq.seq_no)[logical]
            holders = sum(t.count(block) for t in self.tables())
            assert holders == 1, f"block {block} is written while {holders} tables hold it"
            self.kv[block] = tuple(seq.token_ids[: min(end, (logical + 1) * bs)])

    # ---- invariants --------------------------------------------------------------------------

    def tables(self) -> list[list[int]]:
        """Live requests' tables, and those of requests whose blocks wait for a step in flight."""
        keys = [s.seq_no for s in self.live] + self.sched.retiring
        return [self.bm.block_ids(k) for k in keys]

    def check_blocks(self) -> None:
        held: dict[int, int] = {}
        for table in self.tables():
            for block in table:
                held[block] = held.get(block, 0) + 1
        for block in self.bm.blocks:
            assert block.ref_count == held.get(block.block_id, 0), "ref count != live holders"
        free = set(self.bm.free)
        assert not free & held.keys(), "a block is both free and held"
        assert free | held.keys() == set(range(self.bm.num_blocks)), "a block is lost"
        assert len(free) == len(self.bm.free)

    def check_prefix_hits(self, out: SchedulerOutput | None = None) -> None:
        """Every block a request holds, below what is in the cache (when ``out`` runs: from its
        rows' starts, prefix hits included), holds exactly that request's prefix; two logical
        blocks of one table are never the same block."""
        self.check_blocks()
        bs = self.bm.block_size
        in_cache = {s.seq_no: s.num_computed_tokens for s in self.live}
        if out is not None:
            in_cache = {row.seq_no: row.start for row in out.rows}
        for seq in self.live:
            table = self.bm.block_ids(seq.seq_no)
            assert len(set(table)) == len(table), f"one block twice in a table: {table}"
            for logical in range(in_cache.get(seq.seq_no, 0) // bs):
                want = tuple(seq.token_ids[: (logical + 1) * bs])
                assert self.kv.get(table[logical]) == want, "a block holds another prefix"

    def check_fcfs(self) -> None:
        """No request runs while an older one waits (no grammars here: admission is FCFS)."""
        running = {s.seq_no for s in self.sched.running}
        waiting = [s.seq_no for s in self.sched.waiting]
        assert not running or not waiting or max(running) < min(waiting), \
            "a newer request runs while an older one waits"
        assert waiting == sorted(waiting), "the waiting queue is out of arrival order"


# ---- strategies --------------------------------------------------------------------------------

def prompts(block_size: int):
    repeated = st.builds(lambda t, n: [t] * n, st.integers(1, 3), st.integers(1, 5 * block_size))
    shared = st.lists(st.integers(1, 3), min_size=1, max_size=4 * block_size).map(
        lambda tail: [1, 2, 3, 1] * 2 + tail)
    anything = st.lists(st.integers(1, 3), min_size=1, max_size=5 * block_size)
    return st.one_of(repeated, shared, anything)


@st.composite
def scenarios(draw):
    block_size = draw(st.integers(2, 4))
    cfg = dict(num_blocks=draw(st.integers(4, 16)), block_size=block_size,
               max_num_seqs=draw(st.integers(1, 4)), budget=draw(st.integers(1, 24)),
               prefix_caching=draw(st.booleans()))
    op = st.one_of(
        st.tuples(st.just("add"), prompts(block_size), st.integers(1, 6)),
        st.tuples(st.just("step")), st.tuples(st.just("step")), st.tuples(st.just("step")),
        st.tuples(st.just("abort"), st.integers(0, 7)),
        st.tuples(st.just("overlapped"), st.none() | st.integers(0, 7)),
    )
    return cfg, draw(st.lists(op, min_size=1, max_size=40))


# ---- the properties ----------------------------------------------------------------------------

def replay(sim, ops, after_each=lambda: None) -> None:
    """Apply a scenario's random operations to a simulation, in order."""
    for op in ops:
        if op[0] == "add":
            sim.add(op[1], op[2])
        elif op[0] == "abort":
            sim.abort(op[1])
        elif op[0] == "overlapped":
            sim.overlapped_step(op[1])
        else:
            sim.step()
        after_each()


@FAST
@given(scenarios())
def test_random_interleavings_keep_the_cache_consistent_and_fcfs(scenario):
    cfg, ops = scenario
    sim = Sim.make(**cfg)
    replay(sim, ops, after_each=sim.check_prefix_hits)
    for _ in range(400):  # everything left finishes: no request is starved
        if not sim.live:
            break
        sim.step()
    assert not sim.live and not sim.sched.has_unfinished()
    assert sim.bm.num_free_blocks == sim.bm.num_blocks


@FAST
@given(token=st.integers(1, 3), blocks=st.integers(2, 6), block_size=st.integers(1, 4),
       tail=st.integers(1, 3), again=st.integers(1, 3))
def test_a_prompt_of_one_repeated_token_maps_each_block_once(token, blocks, block_size, tail,
                                                             again):
    """After a prompt of one repeated token is cached, the same prompt (and longer ones) hit each
    cached block at its own position only, and the free pool gives none of them away."""
    sim = Sim.make(num_blocks=3 * (blocks + 2), block_size=block_size, max_num_seqs=4,
                   budget=1000)
    prompt = [token] * (blocks * block_size + tail)
    sim.add(prompt, 1)
    while sim.live:
        sim.step()
    for k in range(again):  # cached blocks now sit in the free pool: hit them, twice at once
        sim.add(prompt + [token] * k * block_size, 2)
        sim.add(prompt, 2)
        sim.step()
        sim.check_prefix_hits()
        assert sim.sched.running[0].num_cached_tokens >= blocks * block_size
    while sim.live:
        sim.step()
    assert sim.bm.num_free_blocks == sim.bm.num_blocks


@FAST
@given(block_size=st.integers(1, 4), lengths=st.lists(st.integers(1, 12), min_size=3, max_size=6),
       max_tokens=st.integers(2, 8), budget=st.integers(4, 32))
def test_under_kv_pressure_preempted_requests_keep_their_place(block_size, lengths, max_tokens,
                                                               budget):
    """A cache that holds one request at its longest: requests are preempted all the time, go
    back to the front of the queue, no request runs while an older one waits, and all finish."""
    need = max(-(-(n + max_tokens) // block_size) for n in lengths)
    sim = Sim.make(num_blocks=need, block_size=block_size, max_num_seqs=4, budget=budget)
    for i, n in enumerate(lengths):
        sim.add([i % 3 + 1] * n, max_tokens)
    for _ in range(50 * len(lengths)):
        if not sim.live:
            break
        sim.step()
    assert not sim.live
