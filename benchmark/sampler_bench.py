"""Sampler micro-benchmark, and offline greedy vs sampled throughput.

    # time per step of 32 mixed rows on vocab 49152, and the offline ratio, this checkout:
    .venv/bin/python benchmark/sampler_bench.py
    # the same against an older checkout (e.g. `git worktree add /tmp/mstar-main main`),
    # alternating old and new in subprocesses, one table row per checkout and round:
    .venv/bin/python benchmark/sampler_bench.py --against /tmp/mstar-main

Micro: 32 rows with mixed parameters (temperature, top-p, top-k, min-p, penalties, greedy rows, 4
seeded rows) on Zipf-shaped logits (``lm_like_logits``); each step samples every row and the
penalised rows' counts grow.
The script imports whichever sampler the checkout on its PYTHONPATH has: the per-row one (before
``mstar/engine/sampling``) or the batched one. Offline: ``mstar.LLM(max_num_seqs=32)``, 64
requests x 96 tokens (EOS ignored), greedy then temperature 0.8 / top_p 0.95, in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve()
VOCAB = 49152
ROWS = 32


def mixed_params() -> list:
    try:
        from mstar.engine.request.sampling_params import SamplingParams as P
    except ImportError:  # --against an older checkout, where it sat in mstar/engine/
        from mstar.engine.request.sampling_params import SamplingParams as P

    rows = ([P(temperature=0.8, top_p=0.95)] * 8 + [P(temperature=0.7, top_k=50)] * 6
            + [P(temperature=1.0, top_k=40, top_p=0.9, min_p=0.05)] * 4
            + [P(temperature=0.9, top_p=0.95, presence_penalty=0.5, frequency_penalty=0.3,
                 repetition_penalty=1.1)] * 4
            + [P(temperature=0)] * 6
            + [P(temperature=0.8, top_p=0.95, top_k=100, seed=s) for s in range(4)])
    assert len(rows) == ROWS
    return rows


def _batched_step(params, device):
    """A step function over the batched sampler (mstar.engine.sampling)."""
    import torch

    from mstar.engine.sampling.batch import RowAdd, SamplingBatch
    from mstar.engine.sampling.sampler import Sampler, SamplingStep

    sampler = Sampler(SamplingBatch(ROWS, VOCAB, device, seed=0))
    added = [RowAdd(i, p, list(range(1, 40)), [],
                    None if p.seed is None else torch.Generator(device).manual_seed(p.seed), None)
             for i, p in enumerate(params)]
    pending = [SamplingStep(list(range(ROWS)), added=added)]

    def step(logits):
        plan = pending.pop() if pending else SamplingStep(list(range(ROWS)))
        return sampler.sample(logits, sampler.begin(plan))[0]

    return step


def _per_row_step(params, device):
    """A step function over the per-row sampler it replaced (mstar/engine/sampler.py)."""
    import torch
    from mstar.engine.logit_adjustments import adjusts_logits
    from mstar.engine.sampler import Sampler, SamplingMetadata
    from mstar.engine.sampling_state import new_sampling_state

    default = torch.Generator(device).manual_seed(0)
    meta = SamplingMetadata(
        params=params,
        generators=[default if p.seed is None else torch.Generator(device).manual_seed(p.seed)
                    for p in params],
        states=[new_sampling_state(p, list(range(1, 40)), {0}, VOCAB, None, device)
                for p in params],
        all_greedy=False, any_adjustment=any(map(adjusts_logits, params)),
        any_logprobs=False, any_state=True)
    meta.any_state = any(s is not None for s in meta.states)
    sampler = Sampler()
    return lambda logits: sampler(logits, meta)[0]


def lm_like_logits(rows: int, vocab: int, seed: int):
    """Zipf-shaped rows in random token order: logit = -a * log(rank), a in 1.2 .. 2.4 per row.
    At temperature 0.8 their top_p 0.95 nuclei span about 3 to 250 tokens, like the built-in
    model's (median 12, wider than 64 tokens in a quarter of rows)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    a = 1.2 + 1.2 * torch.rand(rows, 1, generator=g)
    ranked = -a * torch.arange(1, vocab + 1).log() + 0.1 * torch.randn(rows, vocab, generator=g)
    order = torch.rand(rows, vocab, generator=g).argsort(dim=-1)
    return ranked.gather(1, order)


def micro(steps: int, threads: int) -> dict:
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    params = mixed_params()
    try:
        step, impl = _batched_step(params, device), "batched"
    except ImportError:
        step, impl = _per_row_step(params, device), "per-row"
    logits = [lm_like_logits(ROWS, VOCAB, seed) for seed in range(4)]
    step(logits[0])  # warm-up (and the batch's rows)
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(logits[i % len(logits)])
        times.append((time.perf_counter() - start) * 1000)
    return {"impl": impl, "median_ms": statistics.median(times)}


def offline(num_prompts: int, output_len: int, dtype: str) -> dict:
    from benchmark.offline_throughput import make_prompts
    from mstar import LLM, SamplingParams

    llm = LLM(device="cpu", dtype=dtype, max_num_seqs=32, log_level="warning")
    prompts = make_prompts(num_prompts)
    out = {}
    for name, extra in (("greedy", {"temperature": 0}),
                        ("sampled", {"temperature": 0.8, "top_p": 0.95})):
        params = SamplingParams(max_tokens=output_len, ignore_eos=True, **extra)
        start = time.perf_counter()
        results = llm.generate(prompts, params)
        elapsed = time.perf_counter() - start
        out[name] = sum(len(r.token_ids) for r in results) / elapsed
    out["ratio"] = out["sampled"] / out["greedy"]
    return out


def _child(mode: str, checkout: Path, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, str(HERE), "--child", mode, "--steps", str(args.steps),
           "--num-prompts", str(args.num_prompts), "--output-len", str(args.output_len),
           "--dtype", args.dtype, "--threads", str(args.threads)]
    done = subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="an older checkout to compare with")
    parser.add_argument("--steps", type=int, default=30, help="micro-benchmark steps")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=96)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads in the micro-benchmark (0: torch's default)")
    parser.add_argument("--skip-offline", action="store_true")
    parser.add_argument("--child", choices=("micro", "offline"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "micro":
        print(json.dumps(micro(args.steps, args.threads)))
        return
    if args.child == "offline":
        print(json.dumps(offline(args.num_prompts, args.output_len, args.dtype)))
        return
    checkouts = {"this": HERE.parents[1]}
    if args.against is not None:
        checkouts = {"old": args.against.resolve(), **checkouts}
    modes = ["micro"] + ([] if args.skip_offline else ["offline"])
    results: dict = {}
    for _ in range(args.rounds):
        for mode in modes:
            for name, checkout in checkouts.items():
                results.setdefault((mode, name), []).append(_child(mode, checkout, args))
    print("| checkout | sampler | round | ms/step (median) | greedy tok/s | sampled tok/s | "
          "sampled/greedy |")
    print("|---|---|---|---|---|---|---|")
    for name in checkouts:
        for i, m in enumerate(results[("micro", name)]):
            o = None if args.skip_offline else results[("offline", name)][i]
            cells = ["-"] * 3 if o is None else [f"{o['greedy']:.1f}", f"{o['sampled']:.1f}",
                                                 f"{o['ratio']:.2f}"]
            print(f"| {name} | {m['impl']} | {i + 1} | {m['median_ms']:.1f} | "
                  + " | ".join(cells) + " |")

if __name__ == "__main__":
    main()
