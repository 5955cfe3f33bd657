"""The Triton kernels compile for the H200 (sm_90) without a GPU.

Triton ships its own LLVM and ptxas, so the whole chain down to a cubin runs on CPU. The
interpreter that the other kernel tests use is permissive: it accepts code that the compiler
rejects (tile shapes, dtypes, control flow), so this is the check that the kernels build at all.
It runs in a subprocess, because the test session decorates every kernel for the interpreter.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
# Per kernel: the compile-time constants of one launch at the built-in model's shapes.
KERNELS = {
    ("paged_decode", "_paged_decode_kernel"): dict(
        BLOCK_SIZE=16, GROUP=3, GROUP_PAD=4, HEAD_DIM=64, BLOCK_D=64, BLOCK_N=32),
    ("paged_prefill", "_paged_prefill_kernel"): dict(
        BLOCK_SIZE=16, GROUP=3, HEAD_DIM=64, BLOCK_D=64, BLOCK_M=64, BLOCK_N=64, PRECISION="tf32",
        UPCAST=False),
    ("kv_store", "_store_kv_kernel"): dict(
        NUM_KV_HEADS=3, HEAD_DIM=64, BLOCK_SIZE=16, BLOCK_H=4, BLOCK_D=64),
    ("norm", "_rms_norm_kernel"): dict(HAS_RESIDUAL=True, BLOCK=1024),
    ("rope", "_rope_kernel"): dict(NUM_HEADS=12, HALF=32, BLOCK_H=16, BLOCK_HALF=32),
    ("activation", "_silu_and_mul_kernel"): dict(BLOCK=1024),
}
INDEX_POINTERS = {"block_tables_ptr", "context_lens_ptr", "slots_ptr", "positions_ptr",
                  "q_starts_ptr", "q_lens_ptr"}


def compile_all(dtype: str) -> None:
    """Compile every kernel to a cubin for sm_90 with ``dtype`` activations (in a fresh process)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for (module, name), constants in KERNELS.items():
        fn = getattr(importlib.import_module(f"mstar.kernels.{module}"), name)
        signature = {
            arg: "constexpr" if arg in constants else "*i64" if arg in INDEX_POINTERS
            else f"*{dtype}" if arg.endswith("_ptr") else "fp32" if arg in ("scale", "eps") else "i32"
            for arg in fn.arg_names
        }
        kernel = triton.compile(ASTSource(fn, signature, constants), target=GPUTarget("cuda", 90, 32))
        assert kernel.asm["cubin"], name


def test_kernels_compile_for_sm90(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(Path(__file__).parent)]),
               TRITON_CACHE_DIR=str(tmp_path))  # a cold cache: really compile
    code = "import test_kernel_compile as t; t.compile_all('bf16')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
