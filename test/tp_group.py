"""A tensor-parallel group for tests: each rank a spawned process on CPU (gloo), one torch thread
each (the machine is small), that joins the group, runs ``work(*args, parallel)`` and saves what
it returns; the ranks' results come back in rank order."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path

import torch

from mstar.engine.distributed import join_group, leave_group
from mstar.engine.rendezvous import Rendezvous, free_port
from mstar.ipc.lifecycle import die_with_parent

RANK_TIMEOUT_S = 240


def _rank(work: Callable, args: tuple, rendezvous: Rendezvous, out: Path) -> None:
    die_with_parent()  # a killed test process leaves no rank behind
    torch.set_num_threads(1)
    group = join_group(rendezvous, torch.device("cpu"), RANK_TIMEOUT_S)
    try:
        torch.save(work(*args, group.model), out / f"rank{rendezvous.rank}.pt")
    finally:
        leave_group()


def run_group(work: Callable, args: tuple, size: int, tmp_path: Path) -> list:
    """``work`` (a module-level function, so that a spawned process can import it) on ``size``
    ranks; every rank must exit cleanly."""
    port = free_port("127.0.0.1")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(work, args, Rendezvous("127.0.0.1", port, r, size),
                                              tmp_path))
             for r in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(RANK_TIMEOUT_S)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0] * size
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(size)]
