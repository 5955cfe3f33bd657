"""The native greedy argmax (``fused_ops.greedy_tokens``, ``argmax_ops.h``) answers what
``Tensor.argmax(dim=-1)`` answers: the first index of each row's largest value, and the first NaN
of a row that has one; rows of any length (the 8-lane body and the tail) and rows strided apart."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fused_ops import native  # noqa: F401 (autouse: builds the kernels, skips without AVX2)

from mstar.models.layers import fused_ops

# few distinct values, so that ties are common; infinities and NaN among them
VALUES = st.sampled_from([-2.5, -1.0, 0.0, 0.5, 3.0, float("inf"), float("-inf"), float("nan")])


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(1, 5).flatmap(
    lambda n: st.lists(st.lists(VALUES | st.floats(-4, 4, width=32), min_size=n, max_size=n),
                       min_size=1, max_size=4)),
       nan_share=st.sampled_from([0.0, 1.0]))
def test_the_native_argmax_is_torchs(rows, nan_share):
    width = len(rows[0])
    # widths around the 8-lane body: 1..5 rows' values tiled to widths 1..45
    x = torch.tensor(rows, dtype=torch.float32).repeat(1, 9)[:, : width * 9 - (width > 1)]
    if not nan_share:
        x = torch.nan_to_num(x, nan=0.0, posinf=float("inf"), neginf=float("-inf"))
    assert torch.equal(fused_ops.greedy_tokens(x), x.argmax(dim=-1))


def test_wide_rows_strided_apart_and_a_late_maximum():
    gen = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 49_160, generator=gen)
    logits = wide[:, 3:49_155]  # rows 49,160 apart, not contiguous
    logits[2, -1] = 100.0  # in the tail past the last full 8 lanes
    logits[4, 40_000] = logits[4, 7] = 50.0  # a tie: the first index
    got = fused_ops.greedy_tokens(logits)
    assert torch.equal(got, logits.argmax(dim=-1)) and got[2] == 49_151 and got[4] == 7


def test_other_dtypes_take_torchs_argmax():
    x = torch.randn(3, 20).to(torch.bfloat16)
    assert torch.equal(fused_ops.greedy_tokens(x), x.argmax(dim=-1))
