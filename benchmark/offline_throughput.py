"""Offline throughput: mstar.LLM vs transformers' batched generate on the same workload.

    .venv/bin/python -m benchmark.offline_throughput --num-prompts 32 --output-len 128

Both run fp32 on the same model in the same process; every request generates exactly
``--output-len`` tokens (ignore_eos / min_new_tokens). transformers gets the whole batch at
once (left padding). Reports output tokens per second at full concurrency and at 1.
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_TOPICS = ["the ocean", "a small robot", "the history of Rome", "learning to cook",
           "a rainy afternoon", "mountain climbing", "how computers work", "a lost cat"]
_ASKS = ["Write a short story about", "Explain in simple words", "Give three facts about",
         "Describe", "Write a poem about"]


def make_prompts(n: int, seed: int = 0) -> list[str]:
    """Seeded prompts of varied length (roughly 10 to 80 tokens)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        extra = " ".join(rng.choice(_TOPICS) for _ in range(rng.randint(0, 12)))
        prompts.append(f"{rng.choice(_ASKS)} {rng.choice(_TOPICS)}. Context: {extra}.")
    return prompts


def bench_mstar(llm, prompts: list[str], output_len: int) -> float:
    from mstar import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True)
    start = time.perf_counter()
    results = llm.generate(prompts, params)
    elapsed = time.perf_counter() - start
    return sum(len(r.token_ids) for r in results) / elapsed


def bench_transformers(model, tokenizer, prompts: list[str], output_len: int) -> float:
    import torch

    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=False, max_new_tokens=output_len,
                             min_new_tokens=output_len, pad_token_id=tokenizer.pad_token_id)
    elapsed = time.perf_counter() - start
    return (out.shape[1] - batch["input_ids"].shape[1]) * len(prompts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model dir (default: the built-in model)")
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs per engine and workload, interleaved; the best is reported "
                             "(damps noise from other processes on a shared machine)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mstar import LLM

    llm = LLM(model=args.model, device="cpu", dtype="float32", log_level="warning")
    model_dir = llm.engine.model_dir
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()

    prompts = make_prompts(args.num_prompts)
    bench_mstar(llm, prompts[:2], 4)  # warm-up both paths
    bench_transformers(model, tokenizer, prompts[:2], 4)
    rows = []
    for label, batch in ((f"{len(prompts)} concurrent", prompts), ("1 concurrent", prompts[:1])):
        ours = theirs = 0.0
        for _ in range(args.repeats):
            ours = max(ours, bench_mstar(llm, batch, args.output_len))
            theirs = max(theirs, bench_transformers(model, tokenizer, batch, args.output_len))
        rows.append((label, ours, theirs))
    print(f"threads={torch.get_num_threads()} output_len={args.output_len}")
    print(f"{'workload':<16} {'mstar tok/s':>12} {'transformers tok/s':>19} {'ratio':>7}")
    for label, ours, theirs in rows:
        print(f"{label:<16} {ours:>12.1f} {theirs:>19.1f} {ours / theirs:>6.2f}x")


if __name__ == "__main__":
    main()
