"""The rules a walk graph keeps, one function each; ``WalkGraph`` runs them all when it is built,
so a graph that exists is one the engine can reason about. Each returns the one-line problem or
None (the graph raises it as a ValueError)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from mstar.graph.kinds import EdgeKind

CLIENT_MODALITIES = ("text", "audio")  # what an edge to the client may carry


class GraphShape(Protocol):
    """What the rules read of a graph (``mstar.graph.walk_graph.WalkGraph``, which runs them
    when it is built; named here so this module need not import it)."""

    nodes: tuple[Any, ...]
    edges: tuple[Any, ...]
    walks: tuple[Any, ...]
    emits: tuple[Any, ...]
    node_names: set[str]
    language_models: tuple[Any, ...]
    language_model_names: set[str]
    encoders: tuple[Any, ...]
    codecs: tuple[Any, ...]


def unique_names(g: GraphShape) -> str | None:
    names = [n.name for n in g.nodes]
    return None if len(set(names)) == len(names) else f"node names repeat: {names}"


def has_language_model(g: GraphShape) -> str | None:
    return None if g.language_models else "a walk graph has at least one language-model node"


def one_encoder_per_modality(g: GraphShape) -> str | None:
    if len({n.modality for n in g.encoders}) == len(g.encoders):
        return None
    return "two encoder nodes take the same modality"


def edges_join_known_nodes(g: GraphShape) -> str | None:
    names = g.node_names
    bad = next((e for e in g.edges if e.source not in names or e.target not in names), None)
    return None if bad is None else f"edge {bad.tensor!r} joins unknown nodes"


def streams_have_chunk_policies(g: GraphShape) -> str | None:
    """A streaming edge says how it cuts its stream; no other edge has a policy."""
    for e in g.edges:
        if (e.kind is EdgeKind.STREAM) != (e.chunk is not None):
            return (f"edge {e.tensor!r}: a chunk policy goes with a streaming edge, and only "
                    f"with one")
        if e.kind is EdgeKind.STREAM and e.source not in g.language_model_names:
            return f"streaming edge {e.tensor!r} starts at {e.source}, not a language model"
    return None


def codecs_follow_language_models(g: GraphShape) -> str | None:
    """A codec node is fed by streaming edges from language models only, and by at least one."""
    for codec in g.codecs:
        into = [e for e in g.edges if e.target == codec.name]
        if not into or any(e.kind is not EdgeKind.STREAM for e in into):
            return f"codec node {codec.name} must be fed by streaming edges from a language model"
    return None


def walks_name_known_nodes(g: GraphShape) -> str | None:
    for walk in g.walks:
        missing = sorted(set(walk.nodes) - g.node_names)
        if missing:
            return f"walk {walk.name!r} needs {', '.join(missing)}, which the graph lacks"
    return None


def walks_visit_a_language_model(g: GraphShape) -> str | None:
    bad = next((w for w in g.walks if not g.language_model_names & set(w.nodes)), None)
    return None if bad is None else f"walk {bad.name!r} visits no language model"


def walks_follow_edges(g: GraphShape) -> str | None:
    linked = {(e.source, e.target) for e in g.edges}
    for walk in g.walks:
        for src, dst in itertools.pairwise(walk.nodes):
            if (src, dst) not in linked:
                return f"walk {walk.name!r} steps {src} -> {dst} along no edge"
    return None


def loops_have_a_finish_signal(g: GraphShape) -> str | None:
    """A walk that comes back to a node ends only when a language model in it says finish (its
    stop token, or CSM's all-end frame); that node is named, so the engine knows whose signal
    drains the rest."""
    for walk in g.walks:
        loops = any(c > 1 for c in Counter(walk.nodes).values())
        if walk.finish is None and loops:
            return f"walk {walk.name!r} loops with no finish signal"
        if walk.finish is not None and (walk.finish not in walk.nodes
                                        or walk.finish not in g.language_model_names):
            return f"walk {walk.name!r} finishes at {walk.finish}, not a language model in it"
    return None


def emits_are_typed(g: GraphShape) -> str | None:
    """Text reaches the client from a language model, audio from a codec."""
    kinds = {"text": g.language_model_names, "audio": {n.name for n in g.codecs}}
    for emit in g.emits:
        if emit.modality not in CLIENT_MODALITIES:
            return (f"an edge to the client carries {emit.modality!r}, not one of "
                    f"{', '.join(CLIENT_MODALITIES)}")
        if emit.source not in kinds[emit.modality]:
            return f"{emit.modality} reaches the client from {emit.source}, which cannot make it"
    return None


RULES: tuple[Callable[[GraphShape], str | None], ...] = (
    unique_names, has_language_model, one_encoder_per_modality, edges_join_known_nodes,
    streams_have_chunk_policies, codecs_follow_language_models, walks_name_known_nodes,
    walks_visit_a_language_model, walks_follow_edges, loops_have_a_finish_signal,
    emits_are_typed)


def check(g: GraphShape) -> None:
    """Raise the first broken rule's problem as a ValueError."""
    for rule in RULES:
        problem = rule(g)
        if problem is not None:
            raise ValueError(problem)
