"""The LoRA linear's delta, both shapes of a step's rows (``mstar.models.lora.step``): whatever
the adapters, their token counts and order, and which slots they sit in, each token gets its own
adapter's delta and base tokens get none. Checked against a per-token sum (hypothesis)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.models.lora.linear import LoraLinear
from mstar.models.lora.step import BATCHED_MAX_TOKENS, LoraStep

IN, OUT, RANK, SLOTS = 12, 10, 2, 4


def _spans(owners: list[int | None]) -> dict[int, list[tuple[int, int]]]:
    """slot -> its runs of consecutive tokens."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for t, slot in enumerate(owners):
        if slot is None:
            continue
        runs = spans.setdefault(slot, [])
        if runs and runs[-1][1] == t:
            runs[-1] = (runs[-1][0], t + 1)
        else:
            runs.append((t, t + 1))
    return spans


# Each run: (slot or None for the base, its length); long runs take the segment shape.
runs = st.lists(st.tuples(st.none() | st.integers(0, SLOTS - 1),
                          st.integers(1, 2 * BATCHED_MAX_TOKENS)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(runs=runs, widths=st.lists(st.sampled_from([0, RANK, 3 * RANK]), min_size=SLOTS,
                                  max_size=SLOTS), seed=st.integers(0, 2**16))
def test_each_token_gets_its_adapters_delta(runs, widths, seed):
    torch.manual_seed(seed)
    step = LoraStep()
    linear = LoraLinear(torch.nn.Linear(IN, OUT), step, SLOTS, RANK, shards=3)
    pairs = {}
    for slot, width in enumerate(widths):
        wide = (torch.randn(3 * RANK, IN), torch.randn(OUT, 3 * RANK))
        linear.set_slot(slot, *wide)  # a wider adapter was there before: none of it may remain
        pairs[slot] = (torch.randn(width, IN), torch.randn(OUT, width)) if width else None
        linear.set_slot(slot, *(pairs[slot] or (None, None)))
    owners = [slot for slot, n in runs for _ in range(n)]
    x = torch.randn(len(owners), IN)
    with torch.no_grad():
        want = linear.base(x)
        for t, slot in enumerate(owners):
            if slot is not None and pairs[slot] is not None:
                a, b = pairs[slot]
                want[t] += b @ (a @ x[t])
        step.set(_spans(owners), torch.device("cpu"), torch.float32)
        got = linear(x)
        step.clear()
        base_only = linear(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(base_only, linear.base(x))
