"""A model's walk graph: nodes (stateless encoders, KV-cache language models, codecs), edges (what
one node hands the next), walks (the ordered nodes one request visits) and emits (what reaches the
client, typed by modality).

It is the engine's one declaration of what a model takes and how: the registry entry of each
architecture carries its graph (``mstar.models.loading.registry``), so the API server knows the
modalities, the content-part types it admits and the preflight checks without importing torch,
and the runner calls each encoder node through it.

A text-only model is one node and one walk. A vision-language model adds an image encoder whose
``image_embeds`` edge (PLACEHOLDER_EMBEDDINGS) feeds the language model: an image request walks
``vision_encoder -> language_model`` for its prefill, then ``language_model`` per decode step.
Whisper's audio encoder feeds its decoder by CROSS_ATTENTION: the decoder attends to the
encoder's output for the request's whole life, and no prompt position holds it.

Speech out (issue 35, ``mstar.graph.speech``): a graph may hold several language models (each
its own KV cache and block budget, ``mstar.graph.budgets``), a codec node after a language model,
STREAM edges cut by a chunk policy (``mstar.graph.chunks``), walks that loop until a named
language model's finish signal, and audio emitted to the client. The rules are in
``mstar.graph.rules``. An engine's runner runs one language model (``WalkGraph.language_model``:
the first walk's); Qwen3-Omni's talker runs in a second engine beside its thinker's, chained
(``mstar.engine.chain``); CSM's depth decoder is its backbone node's per-frame head, so CSM's
graph has one language model (docs/speech.rst).

The graph names nodes and never says where they run: placing a node on another worker is a map
from node names to workers, kept outside this description.
"""

from __future__ import annotations

from dataclasses import dataclass

from mstar.graph.chunks import ChunkPolicy
from mstar.graph.kinds import EdgeKind, NodeKind
from mstar.graph.rules import CLIENT_MODALITIES, check

LANGUAGE_MODEL = "language_model"
TEXT = "text"


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
    chunk: ChunkPolicy | None = None  # how a STREAM edge cuts its stream (only those have one)


@dataclass(frozen=True)
class Emit:
    """An edge to the client: ``source``'s output goes out as ``modality`` ("text", "audio")."""

    source: str
    modality: str


@dataclass(frozen=True)
class Walk:
    name: str
    nodes: tuple[str, ...]  # in visiting order; a node may come again (a loop)
    # The language model whose finish signal (stop token; CSM's all-end frame) ends the walk;
    # what it already streamed on drains, then the rest stop. A loop must name one.
    finish: str | None = None


@dataclass(frozen=True)
class WalkGraph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    walks: tuple[Walk, ...]
    emits: tuple[Emit, ...] = (Emit(LANGUAGE_MODEL, TEXT),)

    def __post_init__(self) -> None:
        check(self)

    @property
    def node_names(self) -> set[str]:
        return {n.name for n in self.nodes}

    @property
    def language_models(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.LANGUAGE_MODEL)

    @property
    def language_model_names(self) -> set[str]:
        return {n.name for n in self.language_models}

    @property
    def language_model(self) -> Node:
        """The language model the engine runs: the first walk's first (Qwen3-Omni: the thinker;
        a chained walk's later language models run in engines of their own beside it,
        ``mstar.engine.chain``)."""
        names = self.language_model_names
        return self._node(next(n for n in self.walks[0].nodes if n in names))

    @property
    def speaks_frames(self) -> bool:
        """Whether the engine's language model streams its frames to a codec node (CSM's
        backbone; Qwen3-Omni's talker run alone): its steps sample frames (its frame head) and
        the codec runs in its worker (``mstar.worker.speech_out``). Qwen3-Omni's thinker streams
        text to its talker: its engine samples text, and its chain speaks."""
        codecs = {n.name for n in self.codecs}
        return any(e.source == self.language_model.name and e.target in codecs
                   for e in self.edges)

    def _node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    @property
    def encoders(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.ENCODER)

    @property
    def codecs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.kind is NodeKind.CODEC)

    def modalities(self) -> tuple[str, ...]:
        """What a request may carry: text, plus each encoder's input."""
        return (TEXT, *sorted({n.modality for n in self.encoders}))

    def output_modalities(self) -> tuple[str, ...]:
        """What reaches the client: "text", and "audio" where a codec emits it."""
        return tuple(m for m in CLIENT_MODALITIES if any(e.modality == m for e in self.emits))

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
        encoders = {n.name for n in self.encoders}
        walk = next((w for w in self.walks if encoders & set(w.nodes) == needed), None)
        if unknown or walk is None:
            raise ValueError(f"this model takes {', '.join(self.modalities())}; "
                             f"not {', '.join(unknown) or 'this combination'}")
        return walk

    def walk_emitting(self, modality: str) -> Walk:
        """The first walk that reaches a node emitting ``modality`` to the client (speech out:
        "audio"); a ValueError says this model makes only the others."""
        sources = {e.source for e in self.emits if e.modality == modality}
        walk = next((w for w in self.walks if sources & set(w.nodes)), None)
        if walk is None:
            raise ValueError(f"this model outputs {', '.join(self.output_modalities())}; "
                             f"not {modality}")
        return walk


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
