#!/usr/bin/env bash
# The CPU-dependent tests on an emulated AVX2-only CPU (QEMU user mode, -cpu Haswell), for a
# machine that has more (AVX-512, avx512_bf16, AMX). Run by hand, not by CI or make test:
# emulation is 10-50x slower, and the whole set takes 8 to 10 minutes on 2 cores (docs/engine.rst).
#
# What it proves, on a CPU with AVX2 + FMA + F16C and nothing newer (no AVX-VNNI, no AVX-512, no
# avx512_bf16, no AMX):
#   - mstar's feature detection (torch.ops.mstar_cpu.cpu_features) and torch's agree that the CPU
#     is AVX2-only; the preferred kernel level is avx2; oneDNN's native bf16 is off, so
#     MSTAR_DTYPE=auto picks bfloat16 on the bf16-weight kernel, and float32 with int8/q4 weights;
#   - the native kernels build from scratch (a fresh cache directory) and load;
#   - each kernel-level test runs the levels this CPU has (scalar, avx2) and skips the others
#     naming the missing feature (avx_vnni, avx512_vnni+bw+vl); forcing a level the CPU lacks is
#     refused, never executed: no SIGILL (an emulated CPU raises one for an instruction it lacks);
#   - the in-process engine tests whose path depends on the CPU (bf16 through the bf16-weight
#     kernel instead of oneDNN, the fused ops, decode attention and the decode stack, quantized
#     layers, speculation in the auto dtype) pass there.
# What it does NOT prove:
#   - that `make test` passes on such a CPU: only the files below run, in one emulated process;
#   - anything in a child process: QEMU user mode emulates this process only (binfmt_misc is not
#     registered for the host's own architecture), so `mstar serve` children, subprocess tests and
#     the compiler run natively. The build does not depend on the host (no -march=native: each
#     level is compiled with its own target attributes), so its output is the one an AVX2 CPU gets;
#   - /proc/cpuinfo: QEMU passes the host's through, so test_cpu_levels.py's comparison with it is
#     deselected here (the probe below compares mstar's detection with torch's cpuid instead);
#   - speed: emulated timings mean nothing.
# Needs: qemu-x86_64 (Debian: apt-get install -y qemu-user; QEMU 7.2 or later emulates AVX2),
# an x86-64 host and the project's venv (.venv, or PYTHON=/path/to/python). Installs nothing.
# QEMU_CPU overrides the emulated model (e.g. QEMU_CPU=max: QEMU's TCG has no AVX-512 either).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
# Haswell without the features QEMU's TCG cannot emulate (pcid, x2apic, tsc-deadline, hle,
# invpcid, rtm): without this list it warns about each at every start; the SIMD set is the same.
CPU=${QEMU_CPU:-Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm}
# One file at a time: each level and dtype test of the native kernels, then the engine paths.
FILES=(
    test/models/test_cpu_levels.py
    test/models/test_cpu_qdot.py
    test/models/test_cpu_quant_wide.py
    test/models/test_cpu_quant_bf16_tiles.py
    test/models/test_cpu_bf16_linear.py
    test/models/test_cpu_bf16_dot.py
    test/models/test_fused_ops.py
    test/models/test_decode_attention.py
    test/models/test_lora_step.py
    test/models/test_cpu_quant.py
    test/engine/test_speculative_dtype.py
)
# Deselected: the comparison with /proc/cpuinfo (the host's, under QEMU), and the built-in model's
# tests (converting and running the 135M model emulated takes far longer than the rest together;
# its q4 kernels run at the same levels as the tiny models' above).
DESELECT=(
    --deselect test/models/test_cpu_levels.py::test_each_feature_is_detected_on_its_own
    --deselect test/models/test_cpu_quant.py::test_builtin_gguf_q4_weights_equal_the_fp32_conversion
    --deselect test/models/test_cpu_quant.py::test_builtin_q4_greedy_tokens_equal_the_torch_reference
    --deselect test/models/test_cpu_quant.py::test_quality_gate_on_the_builtin_model
)

if [ "$(uname -m)" != x86_64 ]; then echo "avx2_check: needs an x86-64 host" >&2; exit 2; fi
if ! command -v qemu-x86_64 >/dev/null; then
    echo "avx2_check: qemu-x86_64 is missing; on Debian or Ubuntu: apt-get install -y qemu-user" >&2
    exit 2
fi
if [ ! -x "$PYTHON" ]; then echo "avx2_check: no python at $PYTHON (set PYTHON=)" >&2; exit 2; fi
qemu-x86_64 --version | head -1
echo "emulated CPU: $CPU"
# The probe builds the kernels in a fresh directory, as on a fresh clone (removed at exit); the
# tests then use the default cache (~/.cache/mstar), building there too if it has no build yet.
CACHE=$(mktemp -d -t mstar-avx2-check.XXXXXX)
trap 'rm -rf "$CACHE"' EXIT
export PYTHONPATH=. HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

echo "== the emulated CPU, as torch and mstar see it (builds the kernels)"
timeout 900 qemu-x86_64 -cpu "$CPU" "$PYTHON" - "$CACHE" <<'EOF' || { echo "avx2_check: the probe failed (above)" >&2; exit 1; }
import sys
from pathlib import Path

import torch
from mstar.engine.placement import resolve_device_dtype
from mstar.kernels.cpu.build import native_kernels
from mstar.kernels.cpu.levels import LEVELS, Feature
from mstar.models.layers.cpu_linear import native_bf16
from mstar.settings import WorkerSettings

assert native_kernels(Path(sys.argv[1])), "the native kernels did not build"
assert any(Path(sys.argv[1]).glob("kernels/*/*.so")), "the kernels were not built afresh"
auto = WorkerSettings(device="cpu", dtype="auto")
features = Feature(torch.ops.mstar_cpu.cpu_features())
level = LEVELS[torch.ops.mstar_cpu.cpu_level()].name
quantized = WorkerSettings(device="cpu", dtype="auto", quantization="int8")
seen = {"torch capability": torch.backends.cpu.get_cpu_capability(),
        "torch avx512 / vnni / avx512_bf16 / amx": (torch.cpu._is_avx512_supported(),
            torch.cpu._is_vnni_supported(), torch.cpu._is_avx512_bf16_supported(),
            torch.cpu._is_amx_tile_supported()),
        "mstar features": features.name, "mstar level": level, "native bf16 (oneDNN)": native_bf16(),
        "auto dtype": resolve_device_dtype(auto, Path(sys.argv[1]))[1],
        "auto dtype, int8": resolve_device_dtype(quantized, Path(sys.argv[1]))[1]}
for name, value in seen.items():
    print(f"  {name}: {value}")
assert seen["torch capability"] == "AVX2" and not any(seen["torch avx512 / vnni / avx512_bf16 / amx"])
assert features == Feature.AVX2 and level == "avx2" and not native_bf16()
assert seen["auto dtype"] == torch.bfloat16 and seen["auto dtype, int8"] == torch.float32
EOF

status=0
for file in "${FILES[@]}"; do
    echo "== $file"
    start=$SECONDS
    timeout 1800 qemu-x86_64 -cpu "$CPU" "$PYTHON" -m pytest -q -p no:randomly -p no:cacheprovider \
        -n 0 -rs "${DESELECT[@]}" "$file"
    rc=$?
    if [ $rc -eq 132 ]; then echo "avx2_check: SIGILL in $file" >&2; fi
    if [ $rc -ne 0 ]; then status=1; fi
    echo "-- $file: exit $rc, $((SECONDS - start)) s"
done
exit $status
