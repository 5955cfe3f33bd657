"""The kernel levels of the native CPU ops are sets of features: the C++ table and its Python
mirror agree, detection matches what the kernel reports in /proc/cpuinfo, and the level a call
runs at by default is one whose every feature the CPU has."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from mstar.kernels.cpu.levels import FEATURE_NAMES, LEVELS, Feature, missing_features

# /proc/cpuinfo flags that make up each feature.
CPUINFO_FLAGS = {
    Feature.AVX2: {"avx2", "fma", "f16c"},
    Feature.AVX_VNNI: {"avx_vnni"},
    Feature.AVX512_VNNI: {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"},
    Feature.AVX512_BF16: {"avx512f", "avx512bw", "avx512vl", "avx512_bf16"},
    Feature.AMX: {"amx_tile", "amx_bf16", "amx_int8"},
}


def test_the_python_mirror_is_the_kernels_table(best_level):
    for number, level in LEVELS.items():
        assert torch.ops.mstar_cpu.level_features(number) == level.needs, level.name
    with pytest.raises(RuntimeError, match="unknown kernel level"):
        torch.ops.mstar_cpu.level_features(len(LEVELS))
    assert set(FEATURE_NAMES) == set(Feature)


@pytest.mark.skipif(platform.machine() != "x86_64" or not Path("/proc/cpuinfo").exists(),
                    reason="reads the x86-64 flags of /proc/cpuinfo")
def test_each_feature_is_detected_on_its_own(cpu_features):
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    expected = Feature(0)
    for feature, needs in CPUINFO_FLAGS.items():
        if needs <= flags:
            expected |= feature
    assert cpu_features == expected


def test_the_default_level_runs_on_this_cpu(best_level, cpu_features):
    assert missing_features(best_level, cpu_features) == []
    # The preferred level: no other level this CPU has uses more features.
    for number, level in LEVELS.items():
        if not missing_features(number, cpu_features):
            assert bin(level.needs).count("1") <= bin(LEVELS[best_level].needs).count("1")


def test_missing_features_names_only_what_the_cpu_lacks():
    avx512 = Feature.AVX2 | Feature.AVX512_VNNI | Feature.AVX512_BF16  # e.g. Zen 4, Cascade Lake
    assert missing_features(2, avx512) == ["avx_vnni"]
    assert missing_features(3, avx512) == []
    assert missing_features(3, Feature.AVX2 | Feature.AVX_VNNI) == ["avx512_vnni+bw+vl"]  # Alder Lake
    assert missing_features(1, Feature(0)) == ["avx2+fma+f16c"]
