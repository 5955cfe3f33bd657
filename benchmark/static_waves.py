"""Offline static waves alone: the quickest A/B of the engine's decode speed between two checkouts.

    PYTHONPATH=CHECKOUT .venv/bin/python -m benchmark.static_waves [--passes 3] [--dtype float32]

The built-in model through ``mstar.LLM``; 64 chat requests of exactly 96 output tokens (greedy,
ignore_eos), 32 in flight; prints the best of ``--passes`` passes after a short warm-up. Run it
alternately from the two checkouts: on a shared VM the same code varies by 10-15% run to run.
"""

from __future__ import annotations

import argparse
import time

PROMPT = "Write a short story about a small robot who learns to paint."
REQUESTS, TOKENS, IN_FLIGHT = 64, 96, 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    from mstar import LLM, SamplingParams

    llm = LLM(device="cpu", dtype=args.dtype, max_num_seqs=IN_FLIGHT)
    messages = [[{"role": "user", "content": PROMPT}]] * REQUESTS
    params = [SamplingParams(temperature=0, max_tokens=TOKENS, ignore_eos=True,
                             min_tokens=TOKENS)] * REQUESTS
    llm.chat(messages[:8], params[:8])  # warm-up
    best = 0.0
    for _ in range(args.passes):
        start = time.perf_counter()
        llm.chat(messages, params)
        best = max(best, REQUESTS * TOKENS / (time.perf_counter() - start))
    print(f"static waves: best of {args.passes} passes {best:.1f} tok/s")


if __name__ == "__main__":
    main()
