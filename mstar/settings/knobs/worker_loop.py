"""The worker loop: overlap, waits, the interpreter."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from mstar.settings.knobs.field import MAX_COUNT, MAX_WAIT_MS, MAX_WAIT_S, _loop

# What MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=auto picks, by device (resolved by the engine).
SERIAL_ON_CPU = 0
OVERLAP_CAP_ON_CUDA = 1024
PLANNING_THREAD_GONE = "0.1.0 (steps are scheduled from values; no planning thread)"


class WorkerLoopKnobs(BaseModel):
    launch_wait_ms: float = _loop(
        5.0, "After submitting step N+1, how long the main thread waits for the forward-launch "
        "event before going on (a GIL throttle meant to expire early).",
        unit="ms", ge=0.0, le=MAX_WAIT_MS)
    max_consecutive_spec_steps: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Literal["auto"] = _loop(
        "auto", "Overlap scheduling, not speculative decoding: the most continuations in a row "
        "(a continuation is the next step planned while the current one runs, continuing its "
        "batch by one token per request; the name is the reference system's \"speculative "
        "step\") before the engine takes a fresh batch from the scheduler. 0 turns the overlap "
        "off (a serial loop) and warns at startup. With speculative decoding on "
        "(MSTAR_SPECULATIVE_METHOD) the loop is serial: auto yields to it, and a cap above 0 "
        "turns it off instead. "
        f"auto = {SERIAL_ON_CPU} on CPU (the overlap costs more than it hides there; see "
        f"docs/worker_loop.rst) and {OVERLAP_CAP_ON_CUDA} on CUDA.")
    spec_peek_for_fairness: bool = _loop(
        True, "Yield to the scheduler early when other work (a waiting or preempted request) "
        "could be admitted now.")
    pre_plan_spec: bool = _loop(
        True, "Was: build step N+1's input tensors and block tables on a separate planning "
        "thread. The model runner now builds them from its persistent batch on the forward "
        "thread.", no_effect=PLANNING_THREAD_GONE)
    spec_yield_hold_ms: float = _loop(
        0.0, "How long other work must stay ready before a speculating worker yields to it.",
        unit="ms", ge=0.0, le=MAX_WAIT_MS)
    py_switch_interval_sec: float | None = _loop(
        None, "Python thread switch interval applied when the worker starts (sys.setswitchinterval). "
        "Unset keeps the interpreter default.", unit="s", gt=0.0, le=MAX_WAIT_S)
    recompile_limit: int = _loop(
        84, "torch.compile recompile limit, applied whenever compilation is on.", ge=8, le=1024)
    engine_step_sync: bool = _loop(
        False, "Wait for each step to finish before building the next (an A/B switch for the "
        "overlapped loop).")
    phase_timing: int = _loop(
        0, "Every N iterations, log p50/p95/mean of each loop phase. 0 turns it off.",
        unit="iterations", ge=0, le=MAX_COUNT)
