"""Quantized weights on CPU: float32 against bfloat16 activations, the choice MSTAR_DTYPE=auto makes.

    .venv/bin/python -m benchmark.quant_activations --repeats 2

q4 and int8 kernels take float32 activations (csrc/qdot.h); bfloat16 activations are widened
before each linear and narrowed after it, and the one-call decoder stack (decode_stack.py) runs
only when its linears' activation dtype is the step's. Both engines stay loaded and the rounds
alternate, so a busy machine moves both alike; the best round counts. Offline, greedy, built-in
model, at 1 and 32 concurrent requests. The ratio is float32 over bfloat16 of the same run.
"""

from __future__ import annotations

import argparse
import time

from benchmark.cpu_precision import COMMON, cpu_flags
from benchmark.offline_throughput import make_prompts

ACTIVATIONS = ("float32", "bfloat16")


def tok_s(llm, prompts: list[str], tokens: int) -> float:
    from mstar import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    return sum(len(o.token_ids) for o in outputs) / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quantization", nargs="+", default=["q4", "int8"], choices=["q4", "int8"])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    p.add_argument("--repeats", type=int, default=2, help="alternating rounds; the best counts")
    args = p.parse_args()
    from mstar import LLM

    prompts = make_prompts(max(args.concurrency))
    print(f"CPU flags: {' '.join(cpu_flags())}")
    print("| weights | c | float32 act. tok/s | bfloat16 act. tok/s | float32 / bfloat16 |")
    print("|---|---|---|---|---|")
    for quant in args.quantization:
        llms = {dt: LLM(device="cpu", log_level="warning", dtype=dt, quantization=quant, **COMMON)
                for dt in ACTIVATIONS}
        for llm in llms.values():
            tok_s(llm, prompts[:2], 4)  # warm-up
        for c in args.concurrency:
            best = dict.fromkeys(ACTIVATIONS, 0.0)
            for _ in range(args.repeats):
                for dt, llm in llms.items():
                    best[dt] = max(best[dt], tok_s(llm, prompts[:c], args.tokens))
            f32, b16 = best["float32"], best["bfloat16"]
            print(f"| {quant} | {c} | {f32:.1f} | {b16:.1f} | {f32 / b16:.2f}x |", flush=True)
        del llms
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
