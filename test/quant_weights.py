"""Shared by the native CPU kernel tests: a random quantized weight per kind, and the fixture that
runs a test at every SIMD level of a kernel that this CPU has."""

from __future__ import annotations

import pytest
import torch

from mstar.kernels.cpu.levels import LEVELS, missing_features
from mstar.models.quant.formats import Int8Weight, QuantWeight, interleave_q4, quantize_int8, quantize_q4


def random_weight(kind: str, n: int, k: int) -> QuantWeight:
    torch.manual_seed(n * 1000 + k)
    dense = torch.randn(n, k) * torch.rand(n, 1)  # rows of different magnitude
    if kind == "q4":
        return quantize_q4(dense)
    if kind == "int8":
        return quantize_int8(dense)
    return Int8Weight(torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n, k // 32))


def kernel_levels(levels: list[int]):
    """A ``level`` fixture over ``levels`` (numbers of ``mstar.kernels.cpu.levels.LEVELS``); a level
    needing a feature this CPU lacks skips, naming the feature. Levels are sets of features, not an
    order: a CPU may have AVX-512 VNNI without AVX-VNNI."""

    @pytest.fixture(params=levels, ids=[LEVELS[n].name for n in levels])
    def level(request, cpu_features) -> int:
        missing = missing_features(request.param, cpu_features)
        if missing:
            pytest.skip(f"this CPU lacks {', '.join(missing)} (kernel level {LEVELS[request.param].name})")
        return request.param

    return level


def quant_linear(w: QuantWeight, x: torch.Tensor, level: int, wide: bool = False) -> torch.Tensor:
    """The native op of ``w``'s kind at ``level``: the integer-dot kernel, or the wide-batch path
    (q4 in the kernels' interleaved layout)."""
    ops, suffix = torch.ops.mstar_cpu, "_wide" if wide else ""
    if isinstance(w, Int8Weight):
        return getattr(ops, "int8_linear" + suffix)(x, w.weight, w.scales, level)
    return getattr(ops, "q4_linear" + suffix)(x, interleave_q4(w).blocks, w.in_features, level)
