"""The model runner's persistent batch follows the scheduler by diffs alone (no model needed).

Through random interleavings (``test_kv_properties.scenarios``: admission, prefix hits,
preemption, aborts, the overlapped loop's continuation scheduled while a step runs), every step's
inputs gathered from the persistent rows equal what the scheduler and the block manager say:
input ids are the request's tokens (a continuation's is the token sampled the step before),
positions and KV slots follow the block table; every live request keeps one stable slot below
``max_num_seqs``, and the sampled rows' slots are reported in row order.
"""

from __future__ import annotations

import torch
from hypothesis import given
from test_kv_properties import FAST, Sim, replay, scenarios

from mstar.engine.runner.input_batch import InputBatch, StepTensors
from mstar.engine.schedule.scheduler_output import SchedulerOutput

MAX_MODEL_LEN = 64


def assert_same_step(got: StepTensors, expected: StepTensors) -> None:
    """A decode-only step's shortcut (``InputBatch.decode_tensors``) gives the general gather's
    values, dtypes and shapes."""
    for name in StepTensors.__dataclass_fields__:
        a, b = getattr(got, name), getattr(expected, name)
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b), name
        else:
            assert a == b, name


class BatchSim(Sim):
    batch: InputBatch
    slots: dict[int, int]

    def run(self, out: SchedulerOutput) -> None:
        self.batch.apply(out)
        step = self.batch.tensors(out)
        assert_same_step(step, self.batch.gathered_tensors(out, self.batch.slots(out)))
        bs = self.bm.block_size
        ids, positions, slot_mapping = (step.input_ids.tolist(), step.positions.tolist(),
                                        step.slot_mapping.tolist())
        flat = 0
        for row in out.rows:
            seq = self.every[row.seq_no]
            table = self.bm.block_ids(row.seq_no)
            slot = self.batch.slot_of[row.seq_no]
            assert self.slots.setdefault(row.seq_no, slot) == slot, "a live request changed slot"
            for pos in range(row.start, row.end):
                assert positions[flat] == pos
                assert slot_mapping[flat] == table[pos // bs] * bs + pos % bs
                if pos < len(seq):  # else: a wasted row of a request aborted meanwhile
                    assert ids[flat] == seq.token_ids[pos], "input id is not the request's token"
                flat += 1
        live = list(self.batch.slot_of.values())
        assert len(set(live)) == len(live) and all(s < self.sched.max_num_seqs for s in live)
        sampled = [self.batch.slot_of[r.seq_no] for r in out.rows if r.samples]
        assert list(step.sample_slots) == sampled
        for key in out.removed:
            self.slots.pop(key, None)
        super().run(out)
        self.batch.record(step, self.sampled_tokens(out))  # as the runner does


@FAST
@given(scenarios())
def test_the_persistent_batch_matches_the_scheduler_step_by_step(scenario):
    cfg, ops = scenario
    sim = BatchSim.make(**cfg)
    sim.batch = InputBatch(cfg["max_num_seqs"], MAX_MODEL_LEN, cfg["block_size"])
    sim.slots = {}
    replay(sim, ops)
    while sim.live:
        sim.step()
