"""Scheduling, KV pressure, abort and rejection as seen through the engine API."""

from __future__ import annotations

import pytest

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.outputs import RequestOutput, TokenLogprob
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.ipc import messages as m


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2")


def _params(n=8):
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


@pytest.mark.parametrize("cap", [0, 1024], ids=["serial", "overlapped"])
def test_abort_frees_every_block(model_dir, make_engine, cap):
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=64,
                         max_consecutive_spec_steps=cap)
    start = engine.stats().free_blocks
    for i in range(4):
        engine.add_request(f"r{i}", list(range(10, 10 + 7 * (i + 1))), _params(30))
    engine.step()
    engine.step()
    assert engine.stats().free_blocks < start and engine.stats().kv_cache_usage > 0
    for i in range(4):
        engine.abort_request(f"r{i}")
    engine.abort_request("unknown")  # no-op
    if cap:  # a step is in flight: the aborts apply once it is done, and nothing more is emitted
        assert engine.stats().free_blocks < start
        engine.step()
        assert engine.stats().free_blocks == start
        while engine.has_unfinished_requests():  # the step launched meanwhile is all wasted rows
            assert engine.step() == []
    assert engine.stats().free_blocks == start
    assert engine.stats().kv_cache_usage == 0.0
    assert not engine.has_unfinished_requests()


def test_abort_waiting_request(model_dir, make_engine, run):
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=64, max_num_seqs=1,
                         max_consecutive_spec_steps=0)
    engine.add_request("a", [5, 6, 7], _params(4))
    engine.add_request("b", [5, 6, 8], _params(4))
    engine.step()
    assert engine.stats().running == 1 and engine.stats().waiting == 1
    engine.abort_request("b")
    assert engine.stats().waiting == 0
    rest = run(engine, {})
    assert list(rest) == ["a"] and len(rest["a"]["token_ids"]) == 3  # one came from step()
    assert engine.stats().free_blocks == 64


def test_too_long_requests_rejected_with_numbers(model_dir, make_engine, run):
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=8, max_model_len=64)
    with pytest.raises(RequestRejected, match=r"60.*\+ max_tokens \(10\).*max_model_len=64"):
        engine.add_request("long", list(range(5, 65)), _params(10))
    with pytest.raises(RequestRejected, match=r"needs 10 KV blocks.*8 blocks"):
        engine.add_request("big", list(range(5, 35)), _params(10))
    with pytest.raises(RequestRejected, match="empty"):
        engine.add_request("empty", [], _params(1))
    out = run(engine, {"ok": ([5, 6, 7], _params(5))})
    assert len(out["ok"]["token_ids"]) == 5
    assert engine.stats().free_blocks == 8


def test_request_that_fits_alone_survives_kv_pressure(model_dir, make_engine, run):
    # The first request needs all 10 blocks by itself; the others compete for them.
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=10, enable_prefix_caching=False)
    reqs = {"big": (list(range(10, 30)), _params(20))}
    reqs.update({f"s{i}": (list(range(40 + i, 52 + i)), _params(12)) for i in range(3)})
    out = run(engine, reqs)
    assert engine.scheduler.num_preemptions > 0
    assert len(out["big"]["token_ids"]) == 20
    assert all(len(out[f"s{i}"]["token_ids"]) == 12 for i in range(3))
    assert engine.stats().free_blocks == 10


def test_max_num_seqs_and_token_budget_respected(model_dir, make_engine):
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=64, max_num_seqs=2,
                         max_num_batched_tokens=16)
    for i in range(5):
        engine.add_request(f"r{i}", list(range(10, 30)), _params(3))
    while engine.has_unfinished_requests():
        out = engine.scheduler.schedule()
        assert len(out) <= 2 and out.num_tokens <= 16
        engine.postprocess(out, engine.model_runner.execute(out))
    assert engine.stats().free_blocks == 64


def test_shared_prefix_shares_blocks():
    bm = BlockManager(num_blocks=16, block_size=4, enable_prefix_caching=True)

    def seq(tokens):
        return Sequence(str(tokens), tokens, _params(), generator=None)

    a = seq(list(range(10)))
    assert bm.allocate_prompt(a, 10) == 0
    bm.commit_full_blocks(a, 10)
    b = seq(list(range(9)) + [99])
    assert bm.allocate_prompt(b, 10) == 8  # two full blocks reused, the rest computed
    assert bm.block_ids(b.seq_no)[:2] == bm.block_ids(a.seq_no)[:2]
    assert [bm.blocks[i].ref_count for i in bm.block_ids(a.seq_no)] == [2, 2, 1]
    bm.free_request(a.seq_no)
    bm.free_request(b.seq_no)
    assert bm.num_free_blocks == 16
    # A hash collision must not hand out blocks with different tokens.
    c = seq(list(range(10)))
    bm.blocks[bm.hash_to_block[next(iter(bm.hash_to_block))]].token_ids = (7, 7, 7, 7)
    assert bm.allocate_prompt(c, 10) == 0


def test_outputs_cross_the_wire_typed():
    out = RequestOutput("r", [1, 2], True, "stop", 3, 2, [TokenLogprob(1, -0.5, [(1, -0.5)])])
    back = m.decode(m.encode(m.Outputs([out])))
    assert back == m.Outputs([out])
    assert back.outputs[0].logprobs[0].top == [(1, -0.5)]


def test_a_preempted_request_is_recomputed_in_chunks_of_the_cap(model_dir, make_engine):
    """Recomputing a preempted request (prompt and output) is a prefill like any: a request whose
    prompt fits one chunk but whose prompt and output do not is still cut at the cap."""
    cap = 16
    engine = make_engine(model_dir, kv_block_size=4, num_kv_blocks=20, enable_prefix_caching=False,
                         max_prefill_chunk_tokens=cap)
    for i in range(4):  # prompts of 12 (one chunk); with their output, up to 42 to recompute
        engine.add_request(f"s{i}", list(range(40 + i, 52 + i)), _params(30))
    longest = 0
    while engine.has_unfinished_requests():
        out = engine.scheduler.schedule()
        longest = max([longest, *(row.num_tokens for row in out.rows)])
        engine.postprocess(out, engine.model_runner.execute(out))
    assert engine.scheduler.num_preemptions > 0
    assert longest <= cap  # 25 when a recomputation ignored the cap
    assert engine.stats().free_blocks == 20
