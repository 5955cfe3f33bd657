"""Preflight of MSTAR_ENCODER_PLACEMENT against the model to serve, before any process starts:
from config.json's architecture and its registry entry's walk graph (no torch import)."""

from __future__ import annotations

import json
from pathlib import Path

from mstar.graph.placement import KNOB, placed_apart, placement_problem
from mstar.graph.walk_graph import WalkGraph
from mstar.models.loading.registry import entry_for
from mstar.settings import WorkerSettings


def encoder_placement_problem(settings: WorkerSettings, model_dir: Path) -> str | None:
    """The one-line reason ``mstar serve`` must not start with this placement, or None (also
    when the model's config cannot tell: the worker's loader then names what is wrong)."""
    if not settings.encoder_placement:
        return None
    graph = model_graph(model_dir)
    if graph is None:
        return None
    problem = placement_problem(settings.encoder_placement, graph)
    if problem is None and placed_apart(settings.encoder_placement) \
            and settings.tensor_parallel_size > 1:
        return f"{KNOB} puts a node in a process of its own, which needs " \
               f"MSTAR_TENSOR_PARALLEL_SIZE=1 (not {settings.tensor_parallel_size})"
    return problem


def model_graph(model_dir: Path) -> WalkGraph | None:
    """The walk graph of the model in ``model_dir`` (its config's architecture's registry
    entry's), or None when its config cannot tell."""
    try:
        archs = json.loads((model_dir / "config.json").read_text(encoding="utf-8")).get(
            "architectures")
        return entry_for(archs).graph
    except (OSError, ValueError, AttributeError):
        return None
