"""Priority classes in the scheduler (``mstar.engine.schedule.priority``): higher classes are
admitted first, a waiting higher class takes a full batch's slot from the newest request of a lower
class within one step (when MSTAR_PRIORITY_PREEMPTION allows), and the oldest running request of
every class is never preempted for priority. Driven through the scheduler's public entry points,
with the step's outputs faked (no model)."""

from __future__ import annotations

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.engine.schedule.priority import HIGH, LOW, NORMAL
from mstar.engine.schedule.scheduler import Scheduler
from mstar.engine.schedule.scheduler_output import RunnerOutput


def _seq(name: str) -> Sequence:
    return Sequence(name, [5, 6, 7, 8], SamplingParams(max_tokens=64, ignore_eos=True), None)


def _scheduler(max_num_seqs: int, preempt: bool = True) -> Scheduler:
    return Scheduler(BlockManager(256, 4, enable_prefix_caching=False), max_num_seqs, 4096,
                     priority_preemption=preempt)


def _step(scheduler: Scheduler) -> list[str]:
    """One fresh step, its output applied (token 9 for every sampled row): the request ids it
    ran, in row order."""
    out = scheduler.schedule()
    ids = {seq.seq_no: seq.request_id for seq in scheduler.live.values()}
    ran = [ids[row.seq_no] for row in out.rows]
    tokens = [9] * sum(row.num_samples for row in out.rows)
    scheduler.update(out, RunnerOutput(tokens), lambda seq, token: None)
    return ran


def test_higher_classes_are_admitted_first_each_in_arrival_order():
    scheduler = _scheduler(max_num_seqs=1)
    for name, rank in [("low1", LOW), ("norm1", NORMAL), ("high1", HIGH), ("low2", LOW),
                       ("high2", HIGH), ("norm2", NORMAL)]:
        scheduler.add(_seq(name), rank)
    assert [s.request_id for s in scheduler.waiting] == ["high1", "high2", "norm1", "norm2",
                                                         "low1", "low2"]


def test_a_high_request_runs_in_the_next_step_when_the_batch_is_full_of_low_ones():
    scheduler = _scheduler(max_num_seqs=2)
    for i in range(4):
        scheduler.add(_seq(f"low{i}"), LOW)
    assert _step(scheduler) == ["low0", "low1"]
    scheduler.add(_seq("high"), HIGH)
    assert scheduler.can_admit()  # the overlapped loop yields to a fresh step for it
    ran = _step(scheduler)
    assert "high" in ran and "low0" in ran  # the oldest low request keeps running
    assert "low1" not in ran and scheduler.num_preemptions == 1
    # the preempted request waits at the front of its class, ahead of the later low ones
    assert [s.request_id for s in scheduler.waiting] == ["low1", "low2", "low3"]


def test_without_preemption_the_high_request_waits_for_a_slot_but_goes_first():
    scheduler = _scheduler(max_num_seqs=2, preempt=False)
    for i in range(4):
        scheduler.add(_seq(f"low{i}"), LOW)
    _step(scheduler)
    scheduler.add(_seq("high"), HIGH)
    assert not scheduler.can_admit()
    assert "high" not in _step(scheduler) and scheduler.num_preemptions == 0
    assert scheduler.waiting[0].request_id == "high"


def test_the_oldest_running_request_of_a_class_is_never_preempted_for_priority():
    scheduler = _scheduler(max_num_seqs=1)
    scheduler.add(_seq("low0"), LOW)
    _step(scheduler)
    scheduler.add(_seq("high"), HIGH)  # the batch's one slot is the low class's oldest
    assert not scheduler.can_admit()
    assert _step(scheduler) == ["low0"] and scheduler.num_preemptions == 0


def test_one_class_places_in_arrival_order_and_never_preempts():
    scheduler = _scheduler(max_num_seqs=2)
    for i in range(5):
        scheduler.add(_seq(f"r{i}"))
    assert _step(scheduler) == ["r0", "r1"]
    assert not scheduler.can_admit()
    assert _step(scheduler) == ["r0", "r1"] and scheduler.num_preemptions == 0
    assert [s.request_id for s in scheduler.waiting] == ["r2", "r3", "r4"]
