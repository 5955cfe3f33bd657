"""The walk graph's encoder nodes as the runner calls them.

The model hands its encoder callables over once, by node name (``model.encoder_nodes()``); the
names must be the graph's encoder nodes, no more and no fewer (checked at load). Each part of a
request is run by the node its prefill walk gave it (``NewRequest.part_nodes``, from
``mstar.engine.request.walks``). A node placed in
a process of its own (MSTAR_ENCODER_PLACEMENT) is called through the callable its worker gives
instead (``mstar.worker.encoder_node``: the same node's output, sent over the transport). Its output
comes back through the encoder cache (a node is stateless, so the output is kept by the part's
content hash). What the output feeds is
the node's outgoing edge: rows merged at placeholder positions, or cross-attention memory.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mstar.engine.runner.encoder_cache import EncoderCache
from mstar.engine.schedule.scheduler_output import EncoderCounts
from mstar.graph import WalkGraph
from mstar.graph.placement import KNOB
from mstar.models.media_part import MediaPart


class EncoderNodes:
    def __init__(self, graph: WalkGraph, model, cache: EncoderCache,
                 placed: dict[str, Callable[[dict], torch.Tensor]] | None = None,
                 apart: tuple[str, ...] = ()) -> None:
        """``apart``: the nodes MSTAR_ENCODER_PLACEMENT puts in a process of their own;
        ``placed``: the calls that reach them (each one of ``apart`` needs one)."""
        self.graph = graph
        self.cache = cache
        self.calls: dict[str, Callable[[dict], torch.Tensor]] = (
            dict(model.encoder_nodes()) if graph.encoders else {})
        names = {n.name for n in graph.encoders}
        if set(self.calls) != names:
            raise ValueError(f"the model's encoder nodes {sorted(self.calls)} are not its "
                             f"graph's {sorted(names)}")
        placed = placed or {}
        if set(placed) != set(apart):
            raise ValueError(f"{KNOB} places {', '.join(apart) or 'no node'} in a process of "
                             f"its own; only a worker of mstar serve starts one")
        self.calls.update(placed)
        self.feeds = {n.name: graph.edge_from(n.name).kind for n in graph.encoders}  # edge kinds

    def output(self, part: MediaPart, node: str, counts: EncoderCounts) -> torch.Tensor:
        """The output of encoder ``node`` on ``part``, from the cache or computed now."""
        return self.cache.get(part, self.calls[node], counts)
