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

The default settings (MSTAR_DTYPE=auto and every other knob's value: what ``mstar serve`` runs
here) are loaded too: the listed setting they resolve to is marked "(default)", or they get a
row of their own (--no-default skips them).
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
from benchmark.roofline_steps import StepParts, fastest, parts_rows, step_parts
from benchmark.roofline_weights import dtypes, flops_per_token, weight_bytes

DEFAULT = "default"  # the knobs' own values (MSTAR_DTYPE=auto, ...): what `mstar serve` runs
MAX_MODEL_LEN = 256  # the prompts (10-80 tokens) plus --tokens fit
KV_BLOCK = 16
MAX_TOKENS = 160


@dataclass
class Row:
    name: str
    kind: str  # the arithmetic of its linears (arithmetic())
    weight_bytes: int
    flops: int
    by_dtype: dict[str, int]
    default: bool = False  # these are the default settings
    one: float = 0.0  # decode tok/s at one stream, best round
    many: float = 0.0  # at --concurrency
    parts: StepParts | None = None  # one stream's step split into the stack, head and rest


def arithmetic(knobs: dict[str, str]) -> str:
    """What a setting's linears compute in at a decode batch: int8 dot products for int8 and q4
    weights (see the module docstring), bf16 for shipped ones (wide batches run their bf16 copy
    where bf16 is native), else the weights' dtype (float32 or bfloat16)."""
    if knobs["quantization"] == "shipped":
        return "bfloat16"
    return "int8" if knobs["quantization"] != "none" else knobs["dtype"]


def bandwidth_limit(bytes_per_second: float, bytes_per_token: int) -> float:
    """tok/s one stream reaches if every step streams the weights once at full bandwidth."""
    return bytes_per_second / bytes_per_token


def compute_limit(ops_per_second: float, flops_per_token: int) -> float:
    """tok/s of a batch whose steps run at the peak operations per second."""
    return ops_per_second / flops_per_token


def percent(tok_s: float, limit: float) -> float:
    return 100.0 * tok_s / limit


def compute_peak(kind: str, machine: Machine) -> tuple[float, str]:
    """The peak a compute limit uses for arithmetic ``kind``, and its label (float32's where the
    type is not native, saying why)."""
    why = missing(kind, machine.features)
    return (machine.peaks["float32"], f"float32 ({why})") if why else (machine.peaks[kind], kind)


def label(row: Row, machine: Machine) -> str:
    """The setting's name, tagged "default" (the default settings resolved to it) and "emulated"
    (bf16 without native bf16 instructions)."""
    tags = ["default"] if row.default and row.name != DEFAULT else []
    if row.kind == "bfloat16" and missing("bfloat16", machine.features):
        tags.append("emulated")
    return f"{row.name} ({', '.join(tags)})" if tags else row.name


def load(knobs: dict[str, str], model: str | None, concurrency: int):
    from mstar import LLM

    blocks = concurrency * MAX_MODEL_LEN // KV_BLOCK + 8
    return LLM(model=model, device="cpu", log_level="warning", max_model_len=MAX_MODEL_LEN,
               kv_block_size=KV_BLOCK, num_kv_blocks=blocks, **knobs)


def knobs_of(llm) -> dict[str, str]:
    """The dtype and quantization a loaded LLM runs (``auto`` as the engine resolved them)."""
    return {"dtype": str(llm.engine.dtype).removeprefix("torch."),
            "quantization": llm.engine.model_runner.quantization}


def load_all(args: argparse.Namespace) -> tuple[dict, str | None]:
    """Every setting's LLM by name, the default settings first (under the name of the listed
    setting they resolve to, else DEFAULT), and that name (None with --no-default)."""
    llms, default = {}, None
    if args.default:
        llm = load({}, args.model, args.concurrency)
        default = next((n for n in args.settings if SETTINGS[n] == knobs_of(llm)), DEFAULT)
        llms[default] = llm
    for name in args.settings:
        if name not in llms:
            llms[name] = load(SETTINGS[name], args.model, args.concurrency)
    return {n: llms[n] for n in [*args.settings, DEFAULT] if n in llms}, default


def row_of(name: str, llm, default: bool) -> Row:
    """A setting's row: its arithmetic, and its bytes and FLOPs per token counted from its model."""
    model = llm.engine.model_runner.model
    return Row(name, arithmetic(knobs_of(llm)), weight_bytes(model), flops_per_token(model),
               dtypes(model), default)


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
        peak, kind = compute_peak(r.kind, machine)
        cl = compute_limit(peak, r.flops)
        lines.append([label(r, machine), f"{r.weight_bytes / 1e6:.1f}", f"{r.flops / 1e9:.3f}",
                      f"{r.one:.1f}", f"{bw:.1f}", f"{percent(r.one, bw):.0f}%", f"{r.many:.1f}",
                      f"{cl:.1f}", f"{percent(r.many, cl):.0f}%", kind])
    notes = [f"{r.name}: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in r.by_dtype.items()) for r in rows]
    return "\n".join(aligned(lines) + ["", "streamed weights by dtype:"] + notes)


def aligned(lines: list[list[str]]) -> list[str]:
    """A header row and rows of cells as right-aligned columns, a rule under the header."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [" | ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    text.insert(1, "-+-".join("-" * w for w in widths))
    return text


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
    p.add_argument("--no-default", dest="default", action="store_false",
                   help="skip the default settings (MSTAR_DTYPE=auto and the other knobs' values)")
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
    llms, default = load_all(args)
    for llm in llms.values():
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=2))  # warm-up, prefill cached
    llc = llc_bytes()
    if llc and args.bandwidth_mb * 2**20 < 8 * llc:
        print(f"warning: --bandwidth-mb {args.bandwidth_mb} is under 8x the {llc >> 20} MB "
              "last-level cache; the bandwidth is partly the cache's", file=sys.stderr)
    features = cpu_features(next(iter(llms.values())))
    machine = measure(features, args.bandwidth_mb, args.gemm_size, args.repeats)
    print(header(machine), flush=True)
    rows = [row_of(name, llm, name == default) for name, llm in llms.items()]
    run_rounds(rows, llms, prompts, args)
    print(f"\n{args.tokens} decode steps, best of {args.repeats} rounds\n")
    print(table(rows, machine, args.concurrency))
    print("\none stream, milliseconds per decode step (the fastest round's):\n")
    print("\n".join(aligned(parts_rows({label(r, machine): r.parts for r in rows}, machine.bandwidth))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
