"""The LoRA linear's delta, on the torch path (both shapes of a step's rows,
``mstar.models.lora.step``) and the native op (``lora_delta``, one call for all groups): whatever
the adapters, their token counts and order, which slots they sit in and whether their B is
block-diagonal (a fused linear's), each token gets its own adapter's delta and base tokens get
none. Checked against a per-token sum (hypothesis), in float32 and bfloat16."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.models.layers import fused_ops
from mstar.models.lora.linear import LoraLinear
from mstar.models.lora.step import BATCHED_MAX_TOKENS, LoraStep

IN, OUT, RANK, SLOTS = 12, 21, 2, 4  # OUT: not a whole number of 8-float vectors
TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4},
             # bf16 rounds x @ A (magnitude ~3) before B: up to ~0.1 absolute on a delta of ~10
             torch.bfloat16: {"rtol": 2e-2, "atol": 2e-1}}


@pytest.fixture(scope="module")
def native_usable(builtin_cache_dir) -> bool:
    from mstar.kernels.cpu.build import native_kernels

    return native_kernels(builtin_cache_dir) and fused_ops.native_ops_usable(torch.device("cpu"))


def _b(width: int, diagonal: bool) -> torch.Tensor:
    """B [OUT, width]; block-diagonal over three column blocks when asked (q, k, v's shape)."""
    b = torch.randn(OUT, width)
    if diagonal and width == 3 * RANK:
        mask = torch.zeros(OUT, width)
        for shard, rows in enumerate(((0, 9), (9, 15), (15, OUT))):
            mask[rows[0]:rows[1], shard * RANK:(shard + 1) * RANK] = 1
        b *= mask
    return b


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("native", [False, True], ids=["torch", "native"])
@settings(max_examples=60, deadline=None)
@given(runs=runs, widths=st.lists(st.sampled_from([0, RANK, 3 * RANK]), min_size=SLOTS,
                                  max_size=SLOTS), diagonal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_each_token_gets_its_adapters_delta(native_usable, native, dtype, runs, widths, diagonal,
                                            seed):
    if native and not native_usable:
        pytest.skip("the native CPU ops need AVX2 (this CPU lacks avx2)")
    torch.manual_seed(seed)
    step = LoraStep()
    linear = LoraLinear(torch.nn.Linear(IN, OUT).to(dtype), step, SLOTS, RANK, shards=3)
    fused_ops.use_native_ops(linear, native)
    pairs = {}
    for slot, width in enumerate(widths):
        wide = (torch.randn(3 * RANK, IN), torch.randn(OUT, 3 * RANK))
        linear.set_slot(slot, *wide)  # a wider adapter was there before: none of it may remain
        pairs[slot] = (torch.randn(width, IN), _b(width, diagonal)) if width else None
        linear.set_slot(slot, *(pairs[slot] or (None, None)))
    owners = [slot for slot, n in runs for _ in range(n)]
    x = torch.randn(len(owners), IN).to(dtype)
    with torch.no_grad():
        want = linear.base(x).float()
        for t, slot in enumerate(owners):
            if slot is not None and pairs[slot] is not None:
                a, b = (p.to(dtype).float() for p in pairs[slot])
                want[t] += b @ (a @ x[t].float())
        step.set(_spans(owners), torch.device("cpu"), dtype)
        got = linear(x)
        step.clear()
        base_only = linear(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want, **TOLERANCE[dtype])
    torch.testing.assert_close(base_only, linear.base(x))
