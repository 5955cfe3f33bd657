"""Where the milliseconds of a one-stream decode step go (the second table of benchmark/roofline.py).

A step is split by forward hooks on the model's two parts: the decoder stack (``model.model``: the
embedding row, every layer, the final norm; one native call per step where the decode stack runs)
and the LM head (``model.lm_head``, called by ``compute_logits``). The rest of the step is outside
the model: sampling, the scheduler, the runner's inputs and Python. Each part's weight bytes
(benchmark/roofline_weights.py) over its time give the bandwidth it reaches.

Like the tok/s of the first table, a measurement is the difference of two greedy runs of one
prompt, 1 + tokens and 1 tokens (the prompt's prefill cached from the warm-up), per decode step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from torch import nn

from benchmark.roofline_weights import weight_bytes


@dataclass(frozen=True)
class StepParts:
    step_ms: float
    stack_ms: float
    head_ms: float
    stack_bytes: int
    head_bytes: int

    @property
    def rest_ms(self) -> float:
        return self.step_ms - self.stack_ms - self.head_ms


class PartClock:
    """Seconds spent inside each named module's forward (forward pre- and post-hooks)."""

    def __init__(self, parts: dict[str, nn.Module]) -> None:
        self.spent = dict.fromkeys(parts, 0.0)
        self._started: dict[str, float] = {}
        self._hooks = [h for name, module in parts.items() for h in (
            module.register_forward_pre_hook(lambda m, a, name=name: self._start(name)),
            module.register_forward_hook(lambda m, a, o, name=name: self._stop(name)))]

    def _start(self, name: str) -> None:
        self._started[name] = time.perf_counter()

    def _stop(self, name: str) -> None:
        self.spent[name] += time.perf_counter() - self._started[name]

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def timed_run(llm, prompt: str, max_tokens: int, clock: PartClock) -> tuple[float, dict[str, float]]:
    """Wall seconds of one greedy run and the seconds inside each part during it."""
    from mstar import SamplingParams

    before = dict(clock.spent)
    start = time.perf_counter()
    llm.generate([prompt], SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True))
    wall = time.perf_counter() - start
    return wall, {k: clock.spent[k] - before[k] for k in before}


def step_parts(llm, prompt: str, tokens: int) -> StepParts:
    """Milliseconds per decode step at one stream: the whole step, the stack and the LM head."""
    model = llm.engine.model_runner.model
    modules = {"stack": model.model, "head": model.lm_head}  # timed, and their bytes counted
    clock = PartClock(modules)
    try:
        # a warm-up: the first run also pays one-off costs (first calls, oneDNN's primitives),
        # which could outweigh a small model's decode steps and make a part's difference negative
        timed_run(llm, prompt, 1, clock)
        wall_one, parts_one = timed_run(llm, prompt, 1, clock)
        wall, parts = timed_run(llm, prompt, 1 + tokens, clock)
    finally:
        clock.remove()
    ms = {k: (parts[k] - parts_one[k]) * 1e3 / tokens for k in modules}
    return StepParts((wall - wall_one) * 1e3 / tokens, ms["stack"], ms["head"],
                     weight_bytes(modules["stack"]), weight_bytes(modules["head"]))


def fastest(a: StepParts | None, b: StepParts) -> StepParts:
    return b if a is None or b.step_ms < a.step_ms else a


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


def parts_rows(parts: dict[str, StepParts], bandwidth: float) -> list[list[str]]:
    """A header and one row per setting: the step's milliseconds, each part's and the bandwidth
    it reaches (bytes per second of ``bandwidth``)."""
    rows = [["setting", "step ms", "stack ms", "stack GB/s (% of bw)", "LM head ms",
             "head GB/s (% of bw)", "rest ms"]]
    for name, p in parts.items():
        stack, head = gbps(p.stack_bytes, p.stack_ms), gbps(p.head_bytes, p.head_ms)
        rows.append([name, f"{p.step_ms:.2f}", f"{p.stack_ms:.2f}",
                     f"{stack:.1f} ({100 * stack * 1e9 / bandwidth:.0f}%)", f"{p.head_ms:.2f}",
                     f"{head:.1f} ({100 * head * 1e9 / bandwidth:.0f}%)", f"{p.rest_ms:.2f}"])
    return rows
