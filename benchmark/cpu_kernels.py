"""Micro-benchmark of CPU linear kernels at the built-in model's shapes, decode batch sizes 1/8/32.

    .venv/bin/python -m benchmark.cpu_kernels [--threads 2] [--compile]

Each candidate computes y = x @ W^T for every shape of SmolLM2-135M (hidden 576, intermediate
1536, vocab 49152; 9 q heads and 3 kv heads of 64), x float32. The bf16 candidates store W in
bf16: ``bf16_linear`` is torch's, ``mstar_bf16`` the native bf16-weight kernel (float32
arithmetic) that bf16 models use on CPUs without native bf16. To time weights the way a decode step sees them
(streamed from memory, not hot in the 32 MB L3), each candidate cycles through enough copies of the
weight to exceed --cold-mb of float32 data. Reported: the fastest of --repeats sweeps, in
microseconds per call; the machine is shared, so compare columns of one run and prefer the minimum.
With --threads 1 the time is the thread's CPU time (time.thread_time), which other processes on a
busy machine do not inflate; with more threads it is wall time. ``--baseline REV`` also builds the
kernels of git revision REV (under the op namespace ``mstar_cpu_base``) and times them as
``base_q4`` / ``base_int8`` / ``base_bf16`` interleaved with the current ones (sweep by sweep), for
before/after tables; ``--only mstar_q4`` then also times ``base_q4``.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from mstar.kernels.cpu.build import SOURCES, build_dir, native_kernels
from mstar.kernels.cpu.levels import Feature
from mstar.models.quant.formats import Q4Weight, dequantize_q4, interleave_q4, quantize_int8, quantize_q4
from mstar.settings import WorkerSettings

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536),
          "lm_head": (49152, 576)}
BATCHES = (1, 2, 4, 8, 16, 32)


BASELINE = "mstar_cpu_base"


def build_baseline(rev: str) -> None:
    """Builds revision `rev`'s kernels as torch.ops.mstar_cpu_base (cached like the current ones)."""
    from torch.utils.cpp_extension import load

    root = Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    csrc = SOURCES.relative_to(root)
    if subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{rev}:{csrc}"]).returncode:
        csrc = Path("mstar/models/quant/csrc")  # revisions before the move to mstar/kernels/cpu
    work = Path(tempfile.mkdtemp(prefix="mstar_base_"))
    archive = subprocess.check_output(["git", "-C", str(root), "archive", rev, str(csrc)])
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    ops = work / csrc / "ops.cpp"
    text = ops.read_text()
    for library in ("mstar_cpu", "mstar_quant"):  # the op library's name then and now
        text = text.replace(f"TORCH_LIBRARY({library},", f"TORCH_LIBRARY({BASELINE},")
        text = text.replace(f"TORCH_LIBRARY_IMPL({library},", f"TORCH_LIBRARY_IMPL({BASELINE},")
        text = text.replace(f"classes.{library}.", f"classes.{BASELINE}.")
    ops.write_text(text)
    directory = build_dir(WorkerSettings().cache_dir).with_name(f"base-{rev.replace('/', '_')}")
    directory.mkdir(parents=True, exist_ok=True)
    load(f"{BASELINE}_kernels", [str(ops)], extra_cflags=["-O3", "-fopenmp"],
         build_directory=str(directory), is_python_module=False)


def candidates(w: torch.Tensor, use_compile: bool) -> dict[str, tuple[Callable, object]]:
    """name -> (fn(x, state), per-copy state built from w)."""
    pack = torch.ops.mkldnn._reorder_linear_weight
    out = {
        "fp32_packed": (lambda x, s: torch.ops.mkldnn._linear_pointwise(x, s, None, "none", [], ""),
                        pack(w, 32)),
        "fp32_linear": (lambda x, s: F.linear(x, s), w.clone()),
        "bf16_linear": (lambda x, s: F.linear(x.bfloat16(), s), w.bfloat16()),
    }
    try:
        packed_bf16 = pack(w.bfloat16(), 32)
        out["bf16_packed"] = (lambda x, s: torch.ops.mkldnn._linear_pointwise(
            x.bfloat16(), s, None, "none", [], ""), packed_bf16)
    except RuntimeError:
        pass
    q8 = quantize_int8(w)
    out["aten_int8pack"] = (lambda x, s: torch.ops.aten._weight_int8pack_mm(x, s[0], s[1]),
                            (q8.weight, q8.scales.view(-1)))
    int4 = _int4_state(w)
    if int4 is not None:
        out["aten_int4pack"] = (lambda x, s: torch.ops.aten._weight_int4pack_mm_for_cpu(
            x, s[0], 32, s[1]), int4)
    q4 = quantize_q4(w)
    if native_kernels(WorkerSettings().cache_dir):
        x8 = interleave_q4(q4).blocks  # the native kernels' layout
        out["mstar_q4"] = (lambda x, s: torch.ops.mstar_cpu.q4_linear(x, s, x.shape[1]), x8)
        out["mstar_int8"] = (lambda x, s: torch.ops.mstar_cpu.int8_linear(x, s[0], s[1]),
                             (q8.weight, q8.scales))
        out["mstar_bf16"] = (lambda x, s: torch.ops.mstar_cpu.bf16_linear(x, s, None, -1),
                             w.bfloat16())
        # the wide-batch path: dequantize a cache-sized tile, then a GEMM (dequant_gemm.h): bf16
        # tiles at the avx512_bf16 level (dequant_bf16.h), float32 ones elsewhere; *_f32 forces
        # the float32 tiles (the AVX2 level) where the CPU's own level takes bf16 ones
        for suffix, level in wide_levels():
            out["q4_wide" + suffix] = (
                lambda x, s, level=level: torch.ops.mstar_cpu.q4_linear_wide(x, s, x.shape[1], level), x8)
            out["int8_wide" + suffix] = (
                lambda x, s, level=level: torch.ops.mstar_cpu.int8_linear_wide(x, s[0], s[1], level),
                (q8.weight, q8.scales))
    if hasattr(torch.ops, BASELINE) and hasattr(getattr(torch.ops, BASELINE), "q4_linear"):
        base = getattr(torch.ops, BASELINE)  # a revision before the x8 layout takes Q4_1 rows
        out["base_q4"] = (lambda x, s: base.q4_linear(x, s, x.shape[1]), q4.blocks)
        out["base_int8"] = (lambda x, s: base.int8_linear(x, s[0], s[1]), (q8.weight, q8.scales))
        out["base_bf16"] = (lambda x, s: base.bf16_linear(x, s, None, -1), w.bfloat16())
    if use_compile:
        fused = torch.compile(lambda x, blocks: F.linear(x, dequantize_q4(Q4Weight(blocks, x.shape[1]))),
                              dynamic=True)
        out["compiled_q4"] = (lambda x, s: fused(x, s), q4.blocks)
    return out


def wide_levels() -> list[tuple[str, int]]:
    """(name suffix, level) of the wide paths to time: the CPU's own level, and the AVX2 level's
    float32 tiles too where the CPU's own takes bf16 tiles (avx512_bf16)."""
    bf16_tiles = Feature.AVX512_BF16 in Feature(torch.ops.mstar_cpu.cpu_features())
    return [("", -1), ("_f32", 1)] if bf16_tiles else [("", -1)]


def _int4_state(w: torch.Tensor):
    """Weights for aten's int4 CPU kernel (groups of 32, asymmetric), or None if unsupported."""
    n, k = w.shape
    g = w.view(n, k // 32, 32)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = torch.round((g - lo) / scale).clamp(0, 15).to(torch.int32).view(n, k)
    zero = lo + 8 * scale  # aten dequantizes (q - 8) * scale + zero
    try:
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 32)
    except RuntimeError:
        return None
    scales_zeros = torch.stack([scale.squeeze(-1).t(), zero.squeeze(-1).t()], dim=-1).contiguous()
    return packed, scales_zeros


def time_sweep(fn: Callable, states: list, x: torch.Tensor) -> float:
    """Seconds per call of one pass over every copy's state."""
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    start = clock()
    for s in states:
        fn(x, s)
    return (clock() - start) / len(states)


def time_candidates(fns: dict[str, tuple[Callable, list]], x: torch.Tensor, repeats: int) -> list[float]:
    """Microseconds per call of each candidate: the fastest of `repeats` sweeps, the candidates'
    sweeps interleaved (A, B, A, B, ...) so that a busy machine slows them alike."""
    for fn, states in fns.values():
        for s in states[:2]:
            fn(x, s)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeats):
        for name, (fn, states) in fns.items():
            best[name] = min(best[name], time_sweep(fn, states, x))
    return [best[name] * 1e6 for name in fns]


def wanted(name: str, only: str | None) -> bool:
    """--only names a candidate; a baseline's base_* twin comes with its mstar_* one."""
    return not only or name in only.split(",") or \
        name.startswith("base_") and "mstar_" + name.removeprefix("base_") in only.split(",")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cold-mb", type=float, default=96.0)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile'd dequant+mm")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--only", help="comma-separated candidate names (default: all)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--baseline", metavar="REV", help="also time git revision REV's kernels (base_*)")
    args = parser.parse_args()
    if args.baseline:
        build_baseline(args.baseline)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    clock = "CPU" if args.threads == 1 else "wall"
    print(f"threads={args.threads}  {clock} microseconds per call, min of {args.repeats} sweeps")
    for shape_name in args.shapes.split(","):
        n, k = SHAPES[shape_name]
        copies = max(1, int(args.cold_mb * 2**20 // (n * k * 4)))
        weights = [torch.randn(n, k) * 0.02 for _ in range(copies)]
        built = [candidates(w, args.compile) for w in weights]
        names = [name for name in built[0] if wanted(name, args.only)]
        print(f"\n{shape_name} N={n} K={k} ({copies} copies)")
        pairs = [(name, "base_" + name.removeprefix("mstar_")) for name in names
                 if name.startswith("mstar_") and "base_" + name.removeprefix("mstar_") in names]
        print(f"{'M':>4} " + " ".join(f"{name:>14}" for name in names)
              + "".join(f"{name + ' x base':>20}" for name, _ in pairs))
        for m in map(int, args.batches.split(",")):
            x = torch.randn(m, k)
            fns = {name: (built[0][name][0], [b[name][1] for b in built]) for name in names}
            times = dict(zip(names, time_candidates(fns, x, args.repeats), strict=True))
            print(f"{m:>4} " + " ".join(f"{times[name]:>14.0f}" for name in names)
                  + "".join(f"{times[base] / times[name]:>20.2f}" for name, base in pairs))


if __name__ == "__main__":
    main()
