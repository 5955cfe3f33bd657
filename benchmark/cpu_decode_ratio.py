"""Offline decode throughput of several CPU settings, loaded in ONE process and alternated, in CPU time.

    PYTHONPATH=. .venv/bin/python -m benchmark.cpu_decode_ratio --settings fp32 bf16 int8 q4

For a shared (loaded) machine, where wall-clock tok/s moves by 2x between repeats: every setting of
benchmark.cpu_precision is loaded once (mstar.LLM, the built-in model), then each round runs every
setting in turn (A B C D, A B C D, ...) at --concurrency sequences: one greedy token (the prompts'
prefill, cached from the warm-up) and then 1 + --tokens tokens; the difference is the decode of
--tokens steps. Time is the process's CPU time (all threads; with --threads 1 the work itself, which
other processes do not inflate). Reported: decode tokens per CPU second (best round) and the ratio
to the best unquantized setting (fp32 or bf16) of the same run.
"""

from __future__ import annotations

import argparse
import time

from benchmark.cpu_precision import SETTINGS
from benchmark.offline_throughput import make_prompts

UNQUANTIZED = ("fp32", "bf16")


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def decode_seconds(llm, prompts: list[str], tokens: int, params_cls, clock=time.process_time) -> float:
    """Seconds (of ``clock``) of `tokens` decode steps for all prompts (prefill subtracted)."""
    start = clock()
    llm.generate(prompts, params_cls(temperature=0, max_tokens=1, ignore_eos=True))
    one = clock() - start
    start = clock()
    llm.generate(prompts, params_cls(temperature=0, max_tokens=1 + tokens, ignore_eos=True))
    return clock() - start - one


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--tokens", type=int, default=16, help="decode steps per measurement")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=list(CLOCKS), default="cpu",
                   help="cpu: process CPU time (a loaded machine); wall: tok/s (a quiet one)")
    args = p.parse_args()

    import torch

    from mstar import LLM, SamplingParams

    torch.set_num_threads(args.threads)
    prompts = make_prompts(args.concurrency)
    llms = {}
    for name in args.settings:
        llms[name] = LLM(device="cpu", log_level="warning", max_model_len=256, num_kv_blocks=640,
                         torch_num_threads=args.threads, **SETTINGS[name])
        llms[name].generate(prompts, SamplingParams(temperature=0, max_tokens=2))  # warm-up, prefill cached
    best = {name: 0.0 for name in llms}
    unit = "CPU s" if args.clock == "cpu" else "s (wall)"
    for r in range(args.rounds):
        for name, llm in llms.items():
            seconds = decode_seconds(llm, prompts, args.tokens, SamplingParams, CLOCKS[args.clock])
            rate = args.concurrency * args.tokens / seconds
            best[name] = max(best[name], rate)
            print(f"round {r} {name}: {rate:.1f} tok per {unit}", flush=True)
    base = max((best[n] for n in UNQUANTIZED if n in best), default=None)
    print(f"\nc={args.concurrency}, {args.tokens} decode steps, {args.threads} thread(s), "
          f"best of {args.rounds} rounds")
    for name, rate in best.items():
        ratio = f"  {rate / base:.2f}x best unquantized" if base else ""
        print(f"{name:>5}: {rate:8.1f} tok per {unit}{ratio}")


if __name__ == "__main__":
    main()
