"""Where each node of a walk graph runs: the map MSTAR_ENCODER_PLACEMENT gives, from node names
to places, and the one check of it against a model's graph.

``worker`` (every node's default) runs the node in the language model's worker process;
``process`` runs it in a process of its own beside that worker, its output sent back over the
transport as typed messages (an encoder node: ``mstar.worker.encoder_node``; a codec node:
``mstar.worker.codec_node``; a chained walk's later language model, Qwen3-Omni's talker:
``mstar.worker.talker_node``). The language model the
worker's engine runs (the graph's first walk's, ``WalkGraph.language_model``) stays in its worker;
the nodes of a placeable kind (``PLACEABLE_KINDS``) may move.
"""

from __future__ import annotations

from mstar.graph.kinds import NodeKind
from mstar.graph.walk_graph import WalkGraph

KNOB = "MSTAR_ENCODER_PLACEMENT"
WORKER, PROCESS = "worker", "process"
PLACES = (WORKER, PROCESS)
# The kinds of node the map may put in a process of their own (a language model only when it is
# not the one the worker's engine runs: a chained walk's talker); a kind added here is one more
# the worker must start
PLACEABLE_KINDS = frozenset({NodeKind.ENCODER, NodeKind.LANGUAGE_MODEL, NodeKind.CODEC})


def parse_placement(text: str) -> dict[str, str]:
    """``node=place`` items, comma-separated (empty: every node in its worker); a ValueError
    names the first bad item."""
    placement: dict[str, str] = {}
    for item in filter(None, (i.strip() for i in text.split(","))):
        node, sep, place = (s.strip() for s in item.partition("="))
        if not sep or not node or place not in PLACES:
            raise ValueError(f"{KNOB}: {item[:80]!r} is not node=place with place one of "
                             f"{', '.join(PLACES)}")
        if node in placement:
            raise ValueError(f"{KNOB}: node {node[:80]!r} is placed twice")
        placement[node] = place
    return placement


def placement_problem(text: str, graph: WalkGraph) -> str | None:
    """The one-line reason the map cannot place this graph's nodes, or None."""
    try:
        placement = parse_placement(text)
    except ValueError as exc:
        return str(exc)
    movable = placeable(graph)
    unknown = sorted(set(placement) - set(movable))
    if unknown:
        have = ", ".join(movable) or "none (a text-only model)"
        return (f"{KNOB} places {', '.join(unknown)}, not a placeable node of this model's walk "
                f"graph; its placeable nodes: {have}")
    return None


def placeable(graph: WalkGraph) -> list[str]:
    """The nodes the map may place: those of a placeable kind, but the engine's language model."""
    engine_lm = graph.language_model.name
    return [n.name for n in graph.nodes if n.kind in PLACEABLE_KINDS and n.name != engine_lm]


def placed_apart(text: str) -> tuple[str, ...]:
    """The nodes the map puts in a process of their own (a ValueError when it is malformed)."""
    return tuple(n for n, place in parse_placement(text).items() if place == PROCESS)


def nodes_apart(text: str, graph: WalkGraph, kind: NodeKind | None = None) -> tuple[str, ...]:
    """``placed_apart``, checked against the graph (a ValueError names the problem); with
    ``kind``, only the nodes of that kind (the encoder nodes, the codec, the talker)."""
    problem = placement_problem(text, graph)
    if problem is not None:
        raise ValueError(problem)
    of_kind = {n.name for n in graph.nodes if kind is None or n.kind is kind}
    return tuple(n for n in placed_apart(text) if n in of_kind)
