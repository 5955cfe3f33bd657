"""Roofline of CPU decode: each setting's tok/s as a share of what the machine's memory and arithmetic allow.

    PYTHONPATH=. .venv/bin/python -m benchmark.roofline --tokens 32 --repeats 3

Measured on the machine it runs on, with the threads mstar uses: every setting is loaded first
(mstar.LLM, so the engine sets torch's threads from MSTAR_TORCH_NUM_THREADS, or keeps torch's
default when it is 0, exactly as a worker does), then the machine's read bandwidth and peak
multiply-add throughput (float32, and bf16 / int8 where the CPU has native dot products) are
measured with that thread count (benchmark/roofline_machine.py). Weight bytes and FLOPs per token
are counted from each loaded model (benchmark/roofline_weights.py: the tensors a decode step
streams, each once, and the linears' shapes).

Then rounds alternate the settings (A B C D, A B C D, ...; best round counts, so a shared machine's
noise only lowers numbers): decode tok/s (prefill subtracted, greedy, ignore_eos) at one stream and
at --concurrency streams. The table gives, at one stream, tok/s as a percentage of the bandwidth
limit (bandwidth / weight bytes per token: every step streams the weights once), and at
--concurrency, as a percentage of the compute limit (peak operations per second / FLOPs per token)
for the setting's arithmetic: float32 for fp32, bf16 for bf16 (float32 where bf16 is emulated),
int8 dot products for int8 and q4 (mstar's kernels multiply int16 activations, vpdpwssd: half the
int8 rate per instruction, so their own ceiling is half that limit). A second table splits one
stream's step into the decoder stack, the LM head and the rest, with the bandwidth each part
reaches (benchmark/roofline_steps.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from benchmark.cpu_decode_ratio import decode_seconds
from benchmark.cpu_precision import SETTINGS, cpu_flags
from benchmark.offline_throughput import make_prompts
from benchmark.roofline_machine import Machine, llc_bytes, measure, missing
from benchmark.roofline_steps import StepParts, fastest, parts_table, step_parts
from benchmark.roofline_weights import dtypes, flops_per_token, weight_bytes

# The arithmetic each setting's linears run at a decode batch (see the module docstring).
COMPUTE = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8", "q4": "int8"}
MAX_MODEL_LEN = 256  # the prompts (10-80 tokens) plus --tokens fit
KV_BLOCK = 16
MAX_TOKENS = 160


@dataclass
class Row:
    name: str
    weight_bytes: int
    flops: int
    by_dtype: dict[str, int]
    one: float = 0.0  # decode tok/s at one stream, best round
    many: float = 0.0  # at --concurrency
    parts: StepParts | None = None  # one stream's step split into the stack, head and rest


def bandwidth_limit(bytes_per_second: float, bytes_per_token: int) -> float:
    """tok/s one stream reaches if every step streams the weights once at full bandwidth."""
    return bytes_per_second / bytes_per_token


def compute_limit(ops_per_second: float, flops_per_token: int) -> float:
    """tok/s of a batch whose steps run at the peak operations per second."""
    return ops_per_second / flops_per_token


def percent(tok_s: float, limit: float) -> float:
    return 100.0 * tok_s / limit


def compute_peak(name: str, machine: Machine) -> tuple[float, str]:
    """The peak a setting's compute limit uses, and its label (float32's where the type is not
    native, saying why)."""
    kind = COMPUTE[name]
    why = missing(kind, machine.features)
    return (machine.peaks["float32"], f"float32 ({why})") if why else (machine.peaks[kind], kind)


def label(name: str, machine: Machine) -> str:
    """The setting's name, "(emulated)" where its arithmetic type is not native (bf16 on AVX2)."""
    emulated = COMPUTE[name] == "bfloat16" and missing("bfloat16", machine.features)
    return f"{name} (emulated)" if emulated else name


def load(name: str, model: str | None, concurrency: int):
    from mstar import LLM

    blocks = concurrency * MAX_MODEL_LEN // KV_BLOCK + 8
    return LLM(model=model, device="cpu", log_level="warning", max_model_len=MAX_MODEL_LEN,
               kv_block_size=KV_BLOCK, num_kv_blocks=blocks, **SETTINGS[name])


def cpu_features(llm):
    """The native kernels' feature set (the engine built them while loading), None without them."""
    import torch

    from mstar.kernels.cpu.build import native_kernels
    from mstar.kernels.cpu.levels import Feature

    return Feature(torch.ops.mstar_cpu.cpu_features()) if native_kernels(llm.settings.cache_dir) else None


def decode_rate(llm, prompts: list[str], tokens: int) -> float:
    from mstar import SamplingParams

    return len(prompts) * tokens / decode_seconds(llm, prompts, tokens, SamplingParams, time.perf_counter)


def header(machine: Machine) -> str:
    from mstar.kernels.cpu.levels import FEATURE_NAMES, Feature

    found = ("native kernels unavailable" if machine.features is None else
             " ".join(FEATURE_NAMES[f] for f in Feature if f in machine.features) or "none")
    peaks = ", ".join(f"{kind} {p / 1e9:.0f} GOP/s" if p else
                      f"{kind} n/a ({missing(kind, machine.features)})"
                      for kind, p in machine.peaks.items())
    return "\n".join([f"CPU flags: {' '.join(cpu_flags())}", f"native kernel features: {found}",
                      f"threads: {machine.threads}",
                      f"read bandwidth: {machine.bandwidth / 1e9:.1f} GB/s",
                      f"peak (2 ops per multiply-add): {peaks}"])


def table(rows: list[Row], machine: Machine, concurrency: int) -> str:
    head = ["setting", "MB/token", "GFLOP/token", "c=1 tok/s", "bw limit", "% of bw",
            f"c={concurrency} tok/s", "compute limit", "% of compute", "peak used"]
    lines = [head]
    for r in rows:
        bw = bandwidth_limit(machine.bandwidth, r.weight_bytes)
        peak, kind = compute_peak(r.name, machine)
        cl = compute_limit(peak, r.flops)
        lines.append([label(r.name, machine), f"{r.weight_bytes / 1e6:.1f}", f"{r.flops / 1e9:.3f}",
                      f"{r.one:.1f}", f"{bw:.1f}", f"{percent(r.one, bw):.0f}%", f"{r.many:.1f}",
                      f"{cl:.1f}", f"{percent(r.many, cl):.0f}%", kind])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = [" | ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "-+-".join("-" * w for w in widths))
    notes = [f"{r.name}: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in r.by_dtype.items()) for r in rows]
    return "\n".join(text + ["", "streamed weights by dtype:"] + notes)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--model", default=None, help="model dir (default: the built-in model)")
    p.add_argument("--tokens", type=int, default=32,
                   help=f"decode steps per measurement (at most {MAX_TOKENS})")
    p.add_argument("--concurrency", type=int, default=32, help="streams of the compute-bound point")
    p.add_argument("--repeats", type=int, default=3,
                   help="rounds, and runs of each machine measurement; the best counts")
    p.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer summed for the read bandwidth")
    p.add_argument("--gemm-size", type=int, default=2048, help="n of the n x n x n peak GEMMs")
    args = p.parse_args(argv)
    if not 1 <= args.tokens <= MAX_TOKENS:
        p.error(f"--tokens must be 1..{MAX_TOKENS} (prompts and tokens fit {MAX_MODEL_LEN})")
    return args


def run_rounds(rows: list[Row], llms: dict, prompts: list[str], args: argparse.Namespace) -> None:
    """Alternates the settings for --repeats rounds; each row keeps its best rates."""
    for r in range(args.repeats):
        for row in rows:
            one = decode_rate(llms[row.name], prompts[:1], args.tokens)
            many = decode_rate(llms[row.name], prompts, args.tokens)
            row.one, row.many = max(row.one, one), max(row.many, many)
            row.parts = fastest(row.parts, step_parts(llms[row.name], prompts[0], args.tokens))
            print(f"round {r} {row.name}: c=1 {one:.1f} tok/s, "
                  f"c={args.concurrency} {many:.1f} tok/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from mstar import SamplingParams

    prompts = make_prompts(args.concurrency)
    llms = {}
    for name in args.settings:
        llms[name] = load(name, args.model, args.concurrency)
        llms[name].generate(prompts, SamplingParams(temperature=0, max_tokens=2))  # warm-up, prefill cached
    llc = llc_bytes()
    if llc and args.bandwidth_mb * 2**20 < 8 * llc:
        print(f"warning: --bandwidth-mb {args.bandwidth_mb} is under 8x the {llc >> 20} MB "
              "last-level cache; the bandwidth is partly the cache's", file=sys.stderr)
    features = cpu_features(next(iter(llms.values())))
    machine = measure(features, args.bandwidth_mb, args.gemm_size, args.repeats)
    print(header(machine), flush=True)
    rows = [Row(name, weight_bytes(m), flops_per_token(m), dtypes(m))
            for name, m in ((n, llm.engine.model_runner.model) for n, llm in llms.items())]
    run_rounds(rows, llms, prompts, args)
    print(f"\n{args.tokens} decode steps, best of {args.repeats} rounds\n")
    print(table(rows, machine, args.concurrency))
    print("\none stream, milliseconds per decode step (the fastest round's):\n")
    print(parts_table({label(r.name, machine): r.parts for r in rows}, machine.bandwidth))
    return 0


if __name__ == "__main__":
    sys.exit(main())
