"""What ``auto`` resolves to on CPU (``mstar.settings.checks.auto_precision``), for machine facts
this machine may lack: the engine and preflight apply these same rules with their own view of the
CPU (test/models/test_shipped_precision.py holds the two equal here)."""

from __future__ import annotations

import pytest

from mstar.settings import WorkerSettings
from mstar.settings.checks.auto_precision import (
    SHIPPED,
    cpu_auto_dtype,
    cpu_kv_dtype,
    quantization,
)


def _never() -> bool:
    raise AssertionError("asked whether bf16 runs (which may build the kernels) when not needed")


@pytest.mark.parametrize("native_bf16", [False, True])
def test_quantized_linears_keep_float32_activations_without_asking_about_bf16(native_bf16):
    assert cpu_auto_dtype(True, _never) == "float32"
    assert cpu_auto_dtype(False, lambda: native_bf16) == ("bfloat16" if native_bf16 else
                                                          "float32")


@pytest.mark.parametrize("native_bf16, expected", [(True, "bfloat16"), (False, "float32")])
def test_auto_halves_a_quantized_models_cache_only_with_native_bf16(native_bf16, expected):
    """On an AVX2 CPU the shipped-quantized built-in model keeps a float32 cache: 4 bytes a value,
    not the 2 that preflight once counted there."""
    assert cpu_kv_dtype("auto", "float32", True, native_bf16) == expected
    assert cpu_kv_dtype("auto", "float32", False, native_bf16) == "float32"
    assert cpu_kv_dtype("auto", "bfloat16", False, native_bf16) == "bfloat16"


def test_an_explicit_cache_dtype_is_kept_or_refused():
    assert cpu_kv_dtype("bfloat16", "float32", False, False) == "bfloat16"
    assert cpu_kv_dtype("float32", "float32", True, True) == "float32"
    with pytest.raises(ValueError, match="MSTAR_KV_CACHE_DTYPE=float32 needs activations"):
        cpu_kv_dtype("float32", "bfloat16", False, True)


def test_shipped_only_where_the_run_can_serve_the_shipped_blocks():
    assert quantization(WorkerSettings(), "cpu", ships_quantized=True) == SHIPPED
    assert quantization(WorkerSettings(), "cpu", ships_quantized=False) == "none"
    assert quantization(WorkerSettings(), "cuda", ships_quantized=True) == "none"
    assert quantization(WorkerSettings(quantization="q4"), "cuda", False) == "q4"
    for knobs in ({"dtype": "float32"}, {"tensor_parallel_size": 2},
                  {"allow_runtime_lora_updating": True}):
        assert quantization(WorkerSettings(**knobs), "cpu", ships_quantized=True) == "none"
