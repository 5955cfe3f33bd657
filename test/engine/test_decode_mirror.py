"""The CPU decode mirror against a plain gather of the pages, as sequences join, grow and leave."""

from __future__ import annotations

import random

import torch

from mstar.engine.attention.decode_mirror import DecodeMirror

BLOCK, HEADS, DIM, BLOCKS = 4, 2, 8, 1024


def _gather(cache: torch.Tensor, table: list[int], ctx: int) -> torch.Tensor:
    kv = cache.index_select(2, torch.tensor(table)).reshape(2, HEADS, -1, DIM)
    return kv[:, :, :ctx]


def test_mirror_rows_equal_the_pages_through_churn():
    rng = random.Random(0)
    cache = torch.zeros(2, HEADS, BLOCKS, BLOCK, DIM)
    free = list(range(BLOCKS))
    seqs: dict[int, dict] = {}  # key -> {"table", "ctx"}
    mirror = DecodeMirror()
    next_key, reallocations, steps_with_joiners = 0, 0, 0
    for _ in range(60):
        for key in [k for k in seqs if rng.random() < 0.15]:  # some finish or get preempted
            free += seqs.pop(key)["table"]
        while len(seqs) < 6 and rng.random() < 0.7:  # some join with a prompt already cached
            ctx = rng.randint(1, 20)
            table = [free.pop() for _ in range(-(-ctx // BLOCK))]
            cache.view(2, HEADS, -1, DIM)[:, :, [b * BLOCK + i for b in table for i in range(BLOCK)]] \
                = torch.randn(2, HEADS, len(table) * BLOCK, DIM)
            seqs[next_key] = {"table": table, "ctx": ctx - 1}
            next_key += 1
        if not seqs:
            continue
        keys = list(seqs)
        rng.shuffle(keys)  # batch order changes from step to step
        slots = []
        for key in keys:  # every decoding sequence writes one new token
            s = seqs[key]
            if s["ctx"] == len(s["table"]) * BLOCK:
                s["table"].append(free.pop())
            slot = s["table"][s["ctx"] // BLOCK] * BLOCK + s["ctx"] % BLOCK
            cache.view(2, HEADS, -1, DIM)[:, :, slot] = torch.randn(2, HEADS, DIM)
            s["ctx"] += 1
            slots.append(slot)
        width = max(len(seqs[k]["table"]) for k in keys)
        tables = torch.tensor([seqs[k]["table"] + [0] * (width - len(seqs[k]["table"])) for k in keys])
        shape = (mirror.num_rows_alloc, mirror.capacity)
        step = mirror.plan(keys, [seqs[k]["ctx"] for k in keys], tables, torch.tensor(slots),
                           BLOCK, BLOCKS * BLOCK, torch.float32)
        assert step is not None
        reallocations += shape != (mirror.num_rows_alloc, mirror.capacity)
        steps_with_joiners += step.join_start < step.num_rows
        rows = mirror.update(step, cache)
        for i, key in enumerate(keys):
            row = int(step.row_of_batch[i])
            ctx = seqs[key]["ctx"]
            assert torch.equal(rows[:, :, row, :ctx], _gather(cache, seqs[key]["table"], ctx))
            assert step.mask[row, 0, 0, :ctx].eq(0).all() and step.mask[row, 0, 0, ctx:].eq(
                float("-inf")).all()
    assert steps_with_joiners > 10
    assert reallocations <= 2  # churn costs row copies, not rebuilds


def test_mirror_declines_when_it_would_take_too_much_of_the_cache():
    mirror = DecodeMirror()
    step = mirror.plan([1, 2], [400, 300], torch.zeros(2, 100, dtype=torch.long),
                       torch.tensor([0, 1]), BLOCK, 1024, torch.float32)
    assert step is None
