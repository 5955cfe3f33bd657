"""The machine's limits, measured with torch's current thread count (for benchmark/roofline.py).

Read bandwidth: a float32 sum over a buffer far larger than the last-level cache (a sum does one
add per 4 bytes read, so memory, not arithmetic, bounds it). Peak multiply-add throughput: a
square GEMM big enough to be compute-bound, in float32 (torch.mm), bfloat16 (torch.mm, oneDNN's
avx512_bf16 / AMX kernels) and int8 (torch._int_mm, int8 x int8 -> int32, oneDNN's VNNI / AMX
kernels), counted as 2 operations per multiply-add. Best of N runs each: other processes only ever
make a run slower.

A type the CPU has no instructions for is not measured (torch would emulate it): its peak is None
and the table prints "n/a (no <feature>)". Features are the native kernels' own detection
(``torch.ops.mstar_cpu.cpu_features()``, mstar/kernels/cpu/levels.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from mstar.kernels.cpu.levels import FEATURE_NAMES, Feature

# The features that give each type native dot products (any one of them is enough).
NATIVE = {
    "float32": Feature(0),
    "bfloat16": Feature.AVX512_BF16 | Feature.AMX,
    "int8": Feature.AVX512_VNNI | Feature.AVX_VNNI | Feature.AMX,
}
LLC = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")


@dataclass(frozen=True)
class Machine:
    threads: int
    features: Feature | None  # None: the native kernels did not build, nothing is known
    bandwidth: float  # bytes per second
    peaks: dict[str, float | None]  # operations per second by type; None where not native


def missing(kind: str, features: Feature | None) -> str | None:
    """Why ``kind`` has no native dot product here ("no avx512_bf16 or amx"), or None if it has."""
    needs = NATIVE[kind]
    if not needs:
        return None
    if features is None:
        return "native kernels unavailable"
    if features & needs:
        return None
    return "no " + " or ".join(FEATURE_NAMES[f] for f in Feature if f in needs)


def best_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up: first-touch pages, oneDNN primitive creation
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def read_bandwidth(megabytes: int, repeats: int) -> float:
    """Bytes per second a float32 sum reads, best of ``repeats``."""
    buffer = torch.ones(megabytes * 2**20 // 4)
    return buffer.nbytes / best_seconds(buffer.sum, repeats)


def gemm_peak(kind: str, n: int, repeats: int) -> float:
    """Operations per second (2 per multiply-add) of an n x n x n GEMM in ``kind``."""
    if kind == "int8":
        a = torch.randint(-64, 64, (n, n), dtype=torch.int8)
        b = torch.randint(-64, 64, (n, n), dtype=torch.int8)
        run = lambda: torch._int_mm(a, b)  # noqa: E731
    else:
        dtype = getattr(torch, kind)
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        run = lambda: torch.mm(a, b)  # noqa: E731
    return 2 * n**3 / best_seconds(run, repeats)


def llc_bytes() -> int | None:
    """The last-level cache's size (sysfs "32768K"), None where the kernel does not say."""
    try:
        text = LLC.read_text().strip()
    except OSError:
        return None
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def measure(features: Feature | None, megabytes: int, gemm_n: int, repeats: int) -> Machine:
    peaks = {kind: None if missing(kind, features) else gemm_peak(kind, gemm_n, repeats)
             for kind in NATIVE}
    return Machine(torch.get_num_threads(), features, read_bandwidth(megabytes, repeats), peaks)
