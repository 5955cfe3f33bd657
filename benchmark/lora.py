"""Multi-LoRA throughput on the built-in model, and the delta's kernel choice (docs/lora.rst).

    PYTHONPATH=CHECKOUT .venv/bin/python -m benchmark.lora [--tokens 64] [--dtype float32]
    PYTHONPATH=CHECKOUT .venv/bin/python -m benchmark.lora --kernel

The throughput run, all in one process: tok/s at 32 requests in flight for the base model alone
(no LoRA slots), then with 16 random rank-16 adapters loaded (16 slots) and the requests spread
over 0, 1, 4 and 16 distinct adapters; it prints each and the 16-adapter / base-alone ratio (the
issue's bar: at least 0.7). ``--kernel``: the per-segment delta against a gathered batched
matmul on one linear, the measurement docs/lora.rst quotes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

PROMPT = "Write a short story about a small robot who learns to paint."
IN_FLIGHT, REQUESTS, RANK, ADAPTERS = 32, 64, 16, 16
SPREADS = (0, 1, 4, 16)


def make_adapters(model_dir: Path, root: Path, count: int) -> str:
    """``count`` random rank-16 adapters on every projection; MSTAR_LORA_MODULES for them."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    pairs = []
    for i in range(count):
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        torch.manual_seed(i)
        config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=targets,
                            init_lora_weights=False)
        get_peft_model(model, config).save_pretrained(root / f"a{i}")
        pairs.append(f"a{i}={root / f'a{i}'}")
    return ",".join(pairs)


def tok_s(llm, spread: int, tokens: int) -> float:
    """Requests spread round-robin over ``spread`` adapters (0: all on the base model)."""
    from mstar import SamplingParams

    params = [SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True, min_tokens=tokens,
                             lora=f"a{i % spread}" if spread else None) for i in range(REQUESTS)]
    prompts = [PROMPT] * REQUESTS
    llm.generate(prompts[:8], params[:8])  # warm-up (and the adapters into slots)
    start = time.perf_counter()
    llm.generate(prompts, params)
    return REQUESTS * tokens / (time.perf_counter() - start)


def throughput(dtype: str, tokens: int) -> None:
    from mstar import LLM

    base = LLM(device="cpu", dtype=dtype, max_num_seqs=IN_FLIGHT)
    alone = tok_s(base, 0, tokens)
    model_dir = base.engine.model_dir
    del base
    with tempfile.TemporaryDirectory() as tmp:
        modules = make_adapters(Path(model_dir), Path(tmp), ADAPTERS)
        llm = LLM(device="cpu", dtype=dtype, max_num_seqs=IN_FLIGHT, lora_modules=modules,
                  max_loras=ADAPTERS, max_lora_rank=RANK)
        rates = {spread: tok_s(llm, spread, tokens) for spread in SPREADS}
    print(f"base model alone: {alone:.1f} tok/s")
    for spread, rate in rates.items():
        print(f"LoRA on, {spread:2d} distinct adapters: {rate:.1f} tok/s ({rate / alone:.2f}x)")
    print(f"16 adapters / base alone: {rates[ADAPTERS] / alone:.2f} (bar: 0.70)")


def kernel() -> None:
    """Per-segment delta vs a gathered batched matmul vs the padded batch of slots
    (``mstar.models.lora.step``), one thread, 576 -> 1536, rank 16."""
    import torch

    from mstar.models.lora.step import batched

    torch.manual_seed(0)
    torch.set_num_threads(1)
    hin, hout, slots = 576, 1536, 16
    a, b = torch.randn(slots, RANK, hin), torch.randn(slots, hout, RANK)

    def segments(x, groups):
        out = torch.zeros(x.shape[0], hout)
        for slot, rows in groups:
            out.index_add_(0, rows, (x[rows] @ a[slot].T) @ b[slot].T)
        return out

    def gathered(x, idx):
        return torch.bmm(b[idx], torch.bmm(a[idx], x.unsqueeze(-1))).squeeze(-1)

    a_t, b_t = a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous()  # LoraLinear's

    def padded(x, batch):
        out = torch.zeros(x.shape[0], hout)
        xs = (x.index_select(0, batch.index) * batch.keep).view(batch.slots, batch.most, -1)
        delta = torch.bmm(torch.bmm(xs, a_t[:batch.slots]), b_t[:batch.slots])
        return out.index_add_(0, batch.index, delta.view(-1, hout))

    for tokens, spread in ((32, 1), (32, 4), (32, 16), (256, 4)):
        x = torch.randn(tokens, hin)
        idx = torch.arange(tokens) % spread
        groups = [(s, (idx == s).nonzero().flatten()) for s in range(spread)]
        batch = batched({s: [(t, t + 1) for t in rows.tolist()] for s, rows in groups},
                        torch.device("cpu"), torch.float32)
        for name, run in (("segments", lambda x=x, g=groups: segments(x, g)),
                          ("gathered", lambda x=x, i=idx: gathered(x, i)),
                          ("padded", lambda x=x, p=batch: padded(x, p))):
            run()
            start = time.perf_counter()
            for _ in range(50):
                run()
            ms = (time.perf_counter() - start) / 50 * 1e3
            print(f"{tokens} tokens / {spread} adapters, {name}: {ms:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per request")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--kernel", action="store_true", help="the delta's kernel choice only")
    args = parser.parse_args()
    if args.kernel:
        kernel()
    else:
        throughput(args.dtype, args.tokens)


if __name__ == "__main__":
    main()
