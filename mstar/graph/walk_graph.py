"""A model's walk graph: nodes (stateless encoders, one KV-cache language model), edges (named
tensors from one node to another) and walks (the ordered nodes one request visits).

A text-only model is one node and one walk. A vision-language model adds an image encoder whose
``image_embeds`` edge feeds the language model: an image request walks
``vision_encoder -> language_model`` for its prefill, then ``language_model`` per decode step.

The graph names nodes and never says where they run: placing a node on another worker is a map
from node names to workers, kept outside this description.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass

LANGUAGE_MODEL = "language_model"
TEXT = "text"


class NodeKind(enum.Enum):
    ENCODER = "encoder"  # stateless: same input, same output tensor (so outputs can be cached)
    LANGUAGE_MODEL = "language_model"  # keeps per-request state in the paged KV cache


@dataclass(frozen=True)
class Node:
    name: str
    kind: NodeKind
    modality: str = TEXT  # what the node consumes from the request: "text", "image"


@dataclass(frozen=True)
class Edge:
    tensor: str  # e.g. "image_embeds": [tokens, hidden] rows for the placeholder positions
    source: str
    target: str


@dataclass(frozen=True)
class Walk:
    name: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class WalkGraph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    walks: tuple[Walk, ...]

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"node names repeat: {names}")
        if [n.kind for n in self.nodes].count(NodeKind.LANGUAGE_MODEL) != 1:
            raise ValueError("a walk graph has exactly one language-model node")
        for edge in self.edges:
            if edge.source not in names or edge.target not in names:
                raise ValueError(f"edge {edge.tensor!r} joins unknown nodes")
        linked = {(e.source, e.target) for e in self.edges}
        for walk in self.walks:
            if not walk.nodes or walk.nodes[-1] != self.language_model.name:
                raise ValueError(f"walk {walk.name!r} must end at the language model")
            for src, dst in itertools.pairwise(walk.nodes):
                if (src, dst) not in linked:
                    raise ValueError(f"walk {walk.name!r} steps {src} -> {dst} along no edge")

    @property
    def language_model(self) -> Node:
        return next(n for n in self.nodes if n.kind is NodeKind.LANGUAGE_MODEL)

    @property
    def encoders(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.ENCODER)

    def modalities(self) -> tuple[str, ...]:
        """What a request may carry: text, plus each encoder's input."""
        return (TEXT, *sorted({n.modality for n in self.encoders}))

    def walk(self, name: str) -> Walk:
        for walk in self.walks:
            if walk.name == name:
                return walk
        raise KeyError(f"no walk {name!r}; walks: {[w.name for w in self.walks]}")

    def prefill_walk(self, modalities: set[str]) -> Walk:
        """The walk of a request's prefill: through the encoder of each modality it carries."""
        unknown = sorted(set(modalities) - set(self.modalities()))
        needed = {n.name for n in self.encoders if n.modality in modalities}
        walk = next((w for w in self.walks if set(w.nodes[:-1]) == needed), None)
        if unknown or walk is None:
            raise ValueError(f"this model takes {', '.join(self.modalities())}; "
                             f"not {', '.join(unknown) or 'this combination'}")
        return walk


def text_only() -> WalkGraph:
    """One KV-cache language model: every request (prefill and decode) walks through it alone."""
    lm = Node(LANGUAGE_MODEL, NodeKind.LANGUAGE_MODEL)
    return WalkGraph((lm,), (), (Walk("text", (lm.name,)),))


def with_encoder(encoder: str, modality: str, tensor: str) -> WalkGraph:
    """A language model fed by one stateless encoder: walks ``text`` and ``prefill_<modality>``."""
    lm = Node(LANGUAGE_MODEL, NodeKind.LANGUAGE_MODEL)
    enc = Node(encoder, NodeKind.ENCODER, modality)
    return WalkGraph(
        (enc, lm),
        (Edge(tensor, enc.name, lm.name),),
        (Walk("text", (lm.name,)), Walk(f"prefill_{modality}", (enc.name, lm.name))),
    )
