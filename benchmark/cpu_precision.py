"""CPU precision matrix on the built-in model: fp32, bf16, int8 and q4 in one run, one table.

    .venv/bin/python -m benchmark.cpu_precision --output-dir /tmp/cpu_precision

Per setting, in a fresh process: offline tok/s (mstar.LLM, greedy, ignore_eos) at 1 and 32
concurrent, resident memory after loading, perplexity over the docs and top-1 agreement with fp32
(benchmark.quality), and how many greedy output tokens match fp32's on the benchmark prompts
(the matching prefix, averaged over prompts), and the step-time breakdown at 1 and 32 sequences:
a few decode steps, split into the linear layers (quantized kernels, oneDNN or aten matmuls;
timed by forward hooks) and the rest (norms, rope, attention, cache writes, sampling, Python).
Then `mstar serve` with the same setting, closed-loop streaming chat at c=1 and c=32
(benchmark.runner). Ratios are against fp32 of the same run. The CPU's SIMD flags head the
table, since numbers are per machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SETTINGS = {
    "fp32": {"dtype": "float32", "quantization": "none"},
    "bf16": {"dtype": "bfloat16", "quantization": "none"},
    "int8": {"dtype": "float32", "quantization": "int8"},
    "q4": {"dtype": "float32", "quantization": "q4"},
}
CONCURRENCY = (1, 32)
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")
PROFILE_TOKENS = 8
# Same KV-cache size everywhere, so resident memory compares weights (and fits 32 x 512 tokens).
COMMON = {"max_model_len": 512, "num_kv_blocks": 1056}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_flags() -> list[str]:
    """The SIMD flags of FLAGS this CPU has (from /proc/cpuinfo)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in FLAGS if f in have]
    return []


def step_breakdown(llm, prompts: list[str], params_cls) -> dict:
    """Milliseconds per decode step, total and inside the linear layers (timed by forward hooks
    on every linear module: the forward runs on the engine's own thread, out of a profiler's view)."""
    from torch import nn

    from mstar.models.layers.cpu_bf16_linear import Bf16Linear
    from mstar.models.layers.cpu_linear import PackedLinear
    from mstar.models.quant.linear import QuantLinear

    spent, started = [0.0], {}

    def before(module, args):
        started[module] = time.perf_counter()

    def after(module, args, output):
        spent[0] += time.perf_counter() - started[module]

    linears = [m for m in llm.engine.model_runner.model.modules()
               if isinstance(m, (nn.Linear, PackedLinear, QuantLinear, Bf16Linear))]
    hooks = [h for m in linears
             for h in (m.register_forward_pre_hook(before), m.register_forward_hook(after))]
    llm.generate(prompts, params_cls(temperature=0, max_tokens=1))  # the prompts' prefill, cached
    spent[0] = 0.0
    start = time.perf_counter()
    try:
        llm.generate(prompts, params_cls(temperature=0, max_tokens=PROFILE_TOKENS, ignore_eos=True))
    finally:
        for h in hooks:
            h.remove()
    wall_ms = (time.perf_counter() - start) * 1e3 / PROFILE_TOKENS
    kernel_ms = spent[0] * 1e3 / PROFILE_TOKENS
    return {"step_ms": wall_ms, "kernel_ms": kernel_ms, "rest_ms": wall_ms - kernel_ms}


def offline(name: str, output_len: int, repeats: int, quality_tokens: int) -> dict:
    """One setting's offline numbers (run in its own process, so memory is its own)."""
    import gc

    from benchmark.offline_throughput import make_prompts
    from benchmark.quality import docs_token_ids, score_text
    from mstar import LLM, SamplingParams

    llm = LLM(device="cpu", log_level="warning", **COMMON, **SETTINGS[name])
    gc.collect()
    result = {"rss_mib": rss_mib()}
    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    prompts = make_prompts(max(CONCURRENCY))
    llm.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=4))  # warm-up
    for c in CONCURRENCY:
        best = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            outputs = llm.generate(prompts[:c], params)
            best = max(best, sum(len(o.token_ids) for o in outputs) / (time.perf_counter() - start))
        result[f"offline_c{c}"] = best
    result["greedy"] = [o.token_ids for o in outputs]
    for c in CONCURRENCY:
        result[f"profile_c{c}"] = step_breakdown(llm, prompts[:c], SamplingParams)
    score = score_text(llm.engine, docs_token_ids(llm.tokenizer, quality_tokens), window=256)
    result["perplexity"] = score.perplexity
    result["top1"] = score.top1.tolist()
    return result


def served(name: str, port: int, requests_per_c: int, out: Path) -> dict:
    from benchmark import runner
    from benchmark.runner_client import run_client
    from benchmark.serve_matrix import bench_args, stop, wait_healthy

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in (COMMON | SETTINGS[name]).items()]
    command = [str(Path(sys.executable).parent / "mstar"), "serve", "--port", str(port), *flags]
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "server.log", "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc, 900)
            result = {}
            for c in CONCURRENCY:
                report = run_client(runner.benchmark(bench_args(url, c, requests_per_c * c, out / f"c{c}")))
                result[f"served_c{c}"] = report["metrics"]["output_throughput"]
            return result
        finally:
            stop(proc)


def prefix_agreement(ours: list[list[int]], ref: list[list[int]]) -> float:
    total = matched = 0
    for a, b in zip(ours, ref, strict=True):
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        matched += n
        total += len(b)
    return matched / total


def profile_table(rows: dict[str, dict]) -> str:
    lines = ["setting | c=1 step ms | c=1 kernels ms | c=1 rest ms | c=32 step ms | c=32 kernels ms "
             "| c=32 rest ms", " | ".join("---" for _ in range(7))]
    for name, r in rows.items():
        cells = [f"{r[f'profile_c{c}'][k]:.1f}" for c in CONCURRENCY
                 for k in ("step_ms", "kernel_ms", "rest_ms")]
        lines.append(" | ".join([name, *cells]))
    return "\n".join(lines)


def table(rows: dict[str, dict]) -> str:
    ref = rows["fp32"]
    cols = [c for c in ("offline_c1", "offline_c32", "served_c1", "served_c32") if c in ref]
    head = (" | ".join(["setting", *(c.replace("_c", " c=") for c in cols)])
            + " | RSS MiB | perplexity | top-1 agree | greedy agree")
    lines = [head, " | ".join("---" for _ in head.split(" | "))]
    for name, r in rows.items():
        speeds = [f"{r[c]:.1f} ({r[c] / ref[c]:.2f}x)" for c in cols]
        top1 = sum(a == b for a, b in zip(r["top1"], ref["top1"], strict=True)) / len(ref["top1"])
        lines.append(" | ".join([name, *speeds, f"{r['rss_mib']:.0f}",
                                 f"{r['perplexity']:.3f} ({r['perplexity'] / ref['perplexity']:.4f}x)",
                                 f"{top1:.3f}", f"{prefix_agreement(r['greedy'], ref['greedy']):.3f}"]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output-dir", type=Path, default=Path("/tmp/cpu_precision"))
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2, help="offline runs per point; the best counts")
    p.add_argument("--quality-tokens", type=int, default=2048)
    p.add_argument("--requests-per-c", type=int, default=3, help="served requests = this x c")
    p.add_argument("--port", type=int, default=8124)
    p.add_argument("--offline-only", action="store_true", help="skip the served runs")
    p.add_argument("--one", choices=list(SETTINGS), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args()
    if args.one:
        result = offline(args.one, args.output_len, args.repeats, args.quality_tokens)
        (args.output_dir / f"{args.one}.offline.json").write_text(json.dumps(result))
        return 0
    args.output_dir.mkdir(parents=True, exist_ok=True)
    rows = {}
    flags = cpu_flags()
    print("CPU flags: " + " ".join(flags), flush=True)
    for name in ["fp32"] + [s for s in args.settings if s != "fp32"]:
        child = [sys.executable, "-m", "benchmark.cpu_precision", "--one", name,
                 "--output-dir", str(args.output_dir), "--output-len", str(args.output_len),
                 "--repeats", str(args.repeats), "--quality-tokens", str(args.quality_tokens)]
        subprocess.run(child, check=True)
        rows[name] = json.loads((args.output_dir / f"{name}.offline.json").read_text())
        if not args.offline_only:
            rows[name] |= served(name, args.port, args.requests_per_c, args.output_dir / name)
        print(f"[{name}] " + json.dumps({k: v for k, v in rows[name].items()
                                        if k not in ("greedy", "top1")}), flush=True)
    text = f"CPU flags: {' '.join(flags)}\n\n" + table(rows) + "\n\n" + profile_table(rows)
    (args.output_dir / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
