"""A model's walk graph: nodes (stateless encoders, KV-cache language models), edges (what one
node hands the next) and walks (the ordered nodes one request visits).

It is the engine's one declaration of what a model takes and how: the registry entry of each
architecture carries its graph (``mstar.models.loading.registry``), so the API server knows the
modalities, the content-part types it admits and the preflight checks without importing torch,
and the runner calls each encoder node through it.

A text-only model is one node and one walk. A vision-language model adds an image encoder whose
``image_embeds`` edge (PLACEHOLDER_EMBEDDINGS) feeds the language model: an image request walks
``vision_encoder -> language_model`` for its prefill, then ``language_model`` per decode step.
Whisper's audio encoder feeds its decoder by CROSS_ATTENTION: the decoder attends to the
encoder's output for the request's whole life, and no prompt position holds it.

Room for the next step (issue 35), not built yet: the nodes may hold several language models,
a walk may go on after a language model (a codec node) and may visit a node again (a loop). The
engine runs graphs with one language model today (``WalkGraph.language_model`` says so by name).

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


class EdgeKind(enum.Enum):
    # The source's rows replace the target's token embeddings at the part's placeholder positions
    # (vision models, Qwen2-Audio, Voxtral).
    PLACEHOLDER_EMBEDDINGS = "placeholder_embeddings"
    # The source's output is the target's cross-attention memory for the request's life (Whisper).
    CROSS_ATTENTION = "cross_attention"


@dataclass(frozen=True)
class Node:
    name: str
    kind: NodeKind
    modality: str = TEXT  # what the node consumes from the request: "text", "image", "audio"


@dataclass(frozen=True)
class Edge:
    tensor: str  # e.g. "image_embeds": [tokens, hidden] rows for the placeholder positions
    source: str
    target: str
    kind: EdgeKind = EdgeKind.PLACEHOLDER_EMBEDDINGS


@dataclass(frozen=True)
class Walk:
    name: str
    nodes: tuple[str, ...]  # in visiting order; a node may come again (a loop)


@dataclass(frozen=True)
class WalkGraph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    walks: tuple[Walk, ...]

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"node names repeat: {names}")
        if not self.language_models:
            raise ValueError("a walk graph has at least one language-model node")
        if len({n.modality for n in self.encoders}) != len(self.encoders):
            raise ValueError("two encoder nodes take the same modality")
        for edge in self.edges:
            if edge.source not in names or edge.target not in names:
                raise ValueError(f"edge {edge.tensor!r} joins unknown nodes")
        linked = {(e.source, e.target) for e in self.edges}
        lms = {n.name for n in self.language_models}
        for walk in self.walks:
            if not lms & set(walk.nodes):
                raise ValueError(f"walk {walk.name!r} visits no language model")
            for src, dst in itertools.pairwise(walk.nodes):
                if (src, dst) not in linked:
                    raise ValueError(f"walk {walk.name!r} steps {src} -> {dst} along no edge")

    @property
    def language_models(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.LANGUAGE_MODEL)

    @property
    def language_model(self) -> Node:
        """The one language model the engine runs (graphs with several are the next step)."""
        lms = self.language_models
        if len(lms) != 1:
            raise ValueError(f"the engine runs one language model per graph; this one has "
                             f"{', '.join(n.name for n in lms)}")
        return lms[0]

    @property
    def encoders(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.ENCODER)

    def modalities(self) -> tuple[str, ...]:
        """What a request may carry: text, plus each encoder's input."""
        return (TEXT, *sorted({n.modality for n in self.encoders}))

    def encoder_for(self, modality: str) -> Node:
        """The encoder node that takes ``modality`` (a KeyError names the ones there are)."""
        for node in self.encoders:
            if node.modality == modality:
                return node
        raise KeyError(f"no encoder takes {modality!r}; this model takes "
                       f"{', '.join(self.modalities())}")

    def edge_from(self, node: str) -> Edge:
        """The edge that carries ``node``'s output on (an encoder has one)."""
        found = [e for e in self.edges if e.source == node]
        if len(found) != 1:
            raise KeyError(f"node {node!r} has {len(found)} outgoing edges, not one")
        return found[0]

    def walk(self, name: str) -> Walk:
        for walk in self.walks:
            if walk.name == name:
                return walk
        raise KeyError(f"no walk {name!r}; walks: {[w.name for w in self.walks]}")

    def prefill_walk(self, modalities: set[str]) -> Walk:
        """The walk of a request's prefill: through the encoder of each modality it carries."""
        unknown = sorted(set(modalities) - set(self.modalities()))
        needed = {n.name for n in self.encoders if n.modality in modalities}
        walk = next((w for w in self.walks
                     if {n for n in w.nodes if n not in self._lm_names} == needed), None)
        if unknown or walk is None:
            raise ValueError(f"this model takes {', '.join(self.modalities())}; "
                             f"not {', '.join(unknown) or 'this combination'}")
        return walk

    @property
    def _lm_names(self) -> set[str]:
        return {n.name for n in self.language_models}


def text_only() -> WalkGraph:
    """One KV-cache language model: every request (prefill and decode) walks through it alone."""
    lm = Node(LANGUAGE_MODEL, NodeKind.LANGUAGE_MODEL)
    return WalkGraph((lm,), (), (Walk("text", (lm.name,)),))


def with_encoder(encoder: str, modality: str, tensor: str,
                 kind: EdgeKind = EdgeKind.PLACEHOLDER_EMBEDDINGS) -> WalkGraph:
    """A language model fed by one stateless encoder: walks ``text`` and ``prefill_<modality>``."""
    lm = Node(LANGUAGE_MODEL, NodeKind.LANGUAGE_MODEL)
    enc = Node(encoder, NodeKind.ENCODER, modality)
    return WalkGraph(
        (enc, lm),
        (Edge(tensor, enc.name, lm.name, kind),),
        (Walk("text", (lm.name,)), Walk(f"prefill_{modality}", (enc.name, lm.name))),
    )


def cross_attention_encoder(encoder: str = "audio_encoder", modality: str = "audio",
                            tensor: str = "encoder_hidden_states") -> WalkGraph:
    """An encoder-decoder (Whisper): the encoder's output is the decoder's cross-attention
    memory. Its decoder also runs text alone (the ``text`` walk), as transformers allows."""
    return with_encoder(encoder, modality, tensor, EdgeKind.CROSS_ATTENTION)
