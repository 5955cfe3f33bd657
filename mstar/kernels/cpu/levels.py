"""The kernel levels of the native CPU ops, each a set of instruction-set features.

Mirrors ``csrc/cpu_level.h`` (the ops' ``level_features`` return the C++ table; a test checks the
two agree). A level is not a rung: AVX-512 VNNI does not imply AVX-VNNI, nor the reverse, so a
level runs only where the CPU has every feature it needs, and a test that forces a level the CPU
lacks skips naming the missing features (``missing_features``).
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Feature(enum.IntFlag):
    """The bits of ``torch.ops.mstar_cpu.cpu_features()``, each detected on its own."""

    AVX2 = 1          # AVX2 + FMA + F16C: every SIMD kernel's base
    AVX_VNNI = 2      # VEX vpdpwssd on 256-bit registers
    AVX512_VNNI = 4   # AVX-512 F + BW + VL + VNNI
    AVX512_BF16 = 8   # vdpbf16ps: the bf16 decode linear (csrc/bf16_dot.h)
    AMX = 16          # AMX tiles, bf16 and int8 (the quantized wide path, csrc/dequant_amx.h)


FEATURE_NAMES = {Feature.AVX2: "avx2+fma+f16c", Feature.AVX_VNNI: "avx_vnni",
                 Feature.AVX512_VNNI: "avx512_vnni+bw+vl", Feature.AVX512_BF16: "avx512_bf16",
                 Feature.AMX: "amx"}


class Level(NamedTuple):
    name: str
    needs: Feature


# Every level an op's ``level`` argument takes (-1: the CPU's preferred one, cpu_level()).
LEVELS = {
    0: Level("scalar", Feature(0)),
    1: Level("avx2", Feature.AVX2),
    2: Level("avx_vnni", Feature.AVX2 | Feature.AVX_VNNI),
    3: Level("avx512_vnni", Feature.AVX2 | Feature.AVX512_VNNI),
    # every CPU with avx512_bf16 has AVX-512 VNNI: the integer-dot kernels run at avx512_vnni here
    4: Level("avx512_bf16", Feature.AVX2 | Feature.AVX512_VNNI | Feature.AVX512_BF16),
    # avx512_bf16's kernels, but the quantized linears' wide path on AMX tiles (csrc/dequant_amx.h)
    5: Level("amx", Feature.AVX2 | Feature.AVX512_VNNI | Feature.AVX512_BF16 | Feature.AMX),
}


def missing_features(level: int, cpu: Feature) -> list[str]:
    """The names of the features ``level`` needs that ``cpu`` (a ``cpu_features()`` value) lacks."""
    return [FEATURE_NAMES[f] for f in Feature if f in LEVELS[level].needs and f not in cpu]
