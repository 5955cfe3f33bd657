"""The fused CPU ops (mstar.models.layers.fused_ops) against the torch path they replace, per op and in
the built-in model's decode step.

    .venv/bin/python -m benchmark.fused_ops [--settings fp32 q4] [--concurrency 1 32]

Ops: each op at the built-in model's shapes (hidden 576, intermediate 1536, 9 q and 3 kv heads of
64) for 1 and 32 rows, float32 and bfloat16, microseconds per call; the fastest of --repeats
sweeps, timed as the thread's CPU time (time.thread_time) on one thread, which other processes on
a busy machine do not inflate.

Model: mstar.LLM (greedy, ignore_eos) with the same weights, switching the fused ops off and on
between rounds (``use_native_ops``, and the torch attention backend's native cache write and paged
decode attention, ``use_native``), so both modes see the same machine. Per mode, the best of
--rounds of the median over the decode steps: the forward (timed by hooks on the model; sampling
and scheduling excluded) in wall time and in the calling thread's CPU time (the whole forward's
CPU time with --threads 1, the default, which a busy machine does not inflate), and the wall time
per generated token of the whole decode; the forward's CPU time outside the linear layers
(timed by hooks on every linear module; n/a where the one-call decoder layer runs its linears
inside, out of the hooks' sight), where the fused ops work; and the
process's CPU time per generated token (sampling, scheduling and the engine's bookkeeping
included; with --threads 1 about one core's work, which a busy machine does not inflate either).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from mstar.kernels.cpu.build import native_kernels
from mstar.models.layers import fused_ops
from mstar.models.layers.blocks import RMSNorm, RotaryEmbedding, SiluAndMul, apply_rope
from mstar.settings import WorkerSettings

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 576, 1536, 9, 3, 64
COLUMNS = 5  # measures per mode, see decode_step_ms
SETTINGS = {"fp32": {"dtype": "float32", "quantization": "none"},
            "bf16": {"dtype": "bfloat16", "quantization": "none"},
            "q4": {"dtype": "float32", "quantization": "q4"}}


def cpu_us(fn: Callable[[], object], calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - start) / calls * 1e6)
    return best


def op_cases(rows: int, dtype: torch.dtype) -> dict[str, tuple[Callable, Callable]]:
    """name -> (torch path, fused path), on fresh inputs each call where the op writes in place."""
    norm = RMSNorm(HIDDEN, 1e-5).to(dtype)
    x, residual = torch.randn(rows, HIDDEN, dtype=dtype), torch.randn(rows, HIDDEN, dtype=dtype)
    gate_up = torch.randn(rows, 2 * INTERMEDIATE, dtype=dtype)
    rope = RotaryEmbedding(HEAD_DIM, 2048, {"rope_theta": 10000.0})
    rope.init_cache(torch.device("cpu"), dtype)
    cos, sin = rope(torch.arange(rows) + 100)
    qk = torch.randn(rows, HEADS + KV_HEADS, HEAD_DIM, dtype=dtype)
    act = SiluAndMul()

    def gelu(t):  # GemmaMLP's torch path
        gate, up = t.chunk(2, dim=-1)
        return torch.nn.functional.gelu(gate, approximate="tanh") * up

    return {
        "rms_norm": (lambda: norm(x), lambda: fused_ops.rms_norm(x, norm.weight, norm.eps, False)),
        "add_rms_norm": (lambda: norm(x, residual),
                         lambda: fused_ops.add_rms_norm_(x, residual, norm.weight, norm.eps, False)),
        "silu_and_mul": (lambda: act(gate_up), lambda: fused_ops.silu_and_mul(gate_up)),
        "gelu_tanh_and_mul": (lambda: gelu(gate_up), lambda: fused_ops.gelu_tanh_and_mul(gate_up)),
        "rope": (lambda: apply_rope(qk, cos, sin), lambda: fused_ops.rope_(qk, cos, sin)),
    }


def bench_ops(repeats: int) -> None:
    torch.set_num_threads(1)
    print("op | rows | dtype | torch us | fused us | speed-up")
    print("---|---|---|---|---|---")
    for rows in (1, 32):
        for dtype in (torch.float32, torch.bfloat16):
            for name, (ref, fused) in op_cases(rows, dtype).items():
                t_ref, t_fused = cpu_us(ref, 200, repeats), cpu_us(fused, 200, repeats)
                print(f"{name} | {rows} | {str(dtype)[6:]} | {t_ref:.1f} | {t_fused:.1f} | "
                      f"{t_ref / t_fused:.1f}x", flush=True)


def decode_step_ms(llm, prompts: list[str], tokens: int) -> tuple[float, ...]:
    """Medians over one generate's decode steps: (forward wall ms, forward thread-CPU ms, its
    thread-CPU ms outside the linear layers), then per token of the whole decode (sampling and
    scheduling included): wall ms and process CPU ms."""
    from torch import nn

    from mstar import SamplingParams
    from mstar.models.layers.cpu_bf16_linear import Bf16Linear
    from mstar.models.layers.cpu_linear import PackedLinear
    from mstar.models.quant.linear import QuantLinear

    model = llm.engine.model_runner.model
    wall, cpu, rest, started, linear = [], [], [], [], [0.0, 0.0]

    def before(module, args, kwargs):
        linear[1] = 0.0
        started.append((time.perf_counter(), time.thread_time()))

    def after(module, args, kwargs, output):
        if args[0].numel() == len(prompts):  # a decode step: one token per sequence
            wall.append((time.perf_counter() - started[-1][0]) * 1e3)
            cpu.append((time.thread_time() - started[-1][1]) * 1e3)
            rest.append(cpu[-1] - linear[1] * 1e3)

    def linear_before(module, args):
        linear[0] = time.thread_time()

    def linear_after(module, args, output):
        linear[1] += time.thread_time() - linear[0]

    kinds = (nn.Linear, PackedLinear, QuantLinear, Bf16Linear)
    linears = [m for m in model.modules() if isinstance(m, kinds)]
    hooks = [model.register_forward_pre_hook(before, with_kwargs=True),
             model.register_forward_hook(after, with_kwargs=True)]
    hooks += [h for m in linears for h in (m.register_forward_pre_hook(linear_before),
                                           m.register_forward_hook(linear_after))]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=1))  # prefill, then cached
    try:
        start, start_cpu = time.perf_counter(), time.process_time()
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
        per_token = (time.perf_counter() - start) * 1e3 / tokens
        cpu_per_token = (time.process_time() - start_cpu) * 1e3 / tokens
    finally:
        for h in hooks:
            h.remove()
    return (statistics.median(wall), statistics.median(cpu), statistics.median(rest),
            per_token, cpu_per_token)


def switch_native(llm, enabled: bool, compare: str) -> None:
    """Turn on or off what ``compare`` names: ``all`` (the model's fused ops, the decoder layer
    and the stack in one call included, and the attention backend's native cache write and decode
    attention), ``decode`` (the paged decode attention, the one-call layer and stack),
    ``attention`` (the paged decode attention only), ``layer`` (the one-call decoder layer and
    stack) or ``stack`` (the stack in one call, against a call per layer)."""
    model = llm.engine.model_runner.model
    if compare == "all":
        fused_ops.use_native_ops(model, enabled)
    if compare in ("all", "decode", "attention"):
        llm.engine.model_runner.attn_backend.use_native = enabled
    if compare in ("decode", "layer"):
        for layer in model.model.layers:
            layer.native_ops = enabled
    if compare in ("decode", "layer", "stack"):
        model.model.native_ops = enabled


def bench_model(setting: str, concurrency: list[int], tokens: int, rounds: int,
                threads: int, compare: str) -> None:
    from benchmark.offline_throughput import make_prompts
    from mstar import LLM

    llm = LLM(device="cpu", log_level="warning", max_model_len=512, num_kv_blocks=1056,
              torch_num_threads=threads, **SETTINGS[setting])
    model = llm.engine.model_runner.model
    if not any(getattr(m, "native_ops", False) for m in model.modules()):
        raise SystemExit("the model does not run the fused ops (no native kernels or no AVX2)")
    for c in concurrency:
        prompts = make_prompts(c)
        best = {False: [float("inf")] * COLUMNS, True: [float("inf")] * COLUMNS}
        for _ in range(rounds):
            for native in (False, True):
                switch_native(llm, native, compare)
                got = decode_step_ms(llm, prompts, tokens)
                best[native] = [min(a, b) for a, b in zip(best[native], got, strict=True)]
        switch_native(llm, True, compare)
        cells = [f"{best[False][i]:.1f} | {best[True][i]:.1f} | {best[False][i] / best[True][i]:.2f}x"
                 for i in range(COLUMNS)]
        if best[True][1] - best[True][2] < (best[False][1] - best[False][2]) / 2:
            cells[2] = f"{best[False][2]:.1f} | n/a | n/a"  # the one-call layer hides its linears
        print(f"{setting} | {threads} | {c} | " + " | ".join(cells), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=["fp32", "q4"], choices=list(SETTINGS))
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 32])
    p.add_argument("--tokens", type=int, default=24, help="decode tokens per round")
    p.add_argument("--rounds", type=int, default=3, help="off/on rounds per point; the best counts")
    p.add_argument("--repeats", type=int, default=5, help="op timing sweeps; the best counts")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of the model (with 1, the forward's CPU time is exact)")
    p.add_argument("--compare", default="all",
                   choices=["all", "decode", "attention", "layer", "stack"],
                   help="what the off mode turns off: every fused op and the native attention; "
                        "the paged decode attention and the one-call layer and stack; only the "
                        "attention (vs. mirror + SDPA); only the one-call decoder layer and stack "
                        "(vs. the module-by-module fused path); only the one-call stack (vs. a "
                        "call per layer)")
    p.add_argument("--skip-ops", action="store_true")
    p.add_argument("--skip-model", action="store_true")
    args = p.parse_args()
    if not native_kernels(WorkerSettings().cache_dir):
        raise SystemExit("the native kernels did not build")
    if not args.skip_ops:
        bench_ops(args.repeats)
    if not args.skip_model:
        print("\nsetting | threads | c | forward ms torch | fused | speed-up | forward CPU ms "
              "torch | fused | speed-up | CPU ms outside the linears torch | fused | speed-up "
              "| ms/token torch | fused | speed-up | process CPU ms/token torch | fused | speed-up")
        print("|".join(["---"] * (3 + 3 * COLUMNS)))
        for setting in args.settings:
            bench_model(setting, args.concurrency, args.tokens, args.rounds, args.threads,
                        args.compare)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
