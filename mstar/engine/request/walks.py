"""A request's prefill walk through the model's graph, checked when it is added: every media part
goes to the encoder node of its modality, and its shape suits what that node's edge carries
(placeholder rows need placeholder positions; cross-attention memory has none)."""

from __future__ import annotations

from mstar.engine.request.errors import RequestRejected
from mstar.graph import EdgeKind, WalkGraph
from mstar.models.media_part import MediaPart, modality_of

FIELD = "messages"  # where a request's media parts come from


def part_nodes(graph: WalkGraph, parts: tuple[MediaPart, ...]) -> tuple[str, ...]:
    """Each part's encoder node, in order; RequestRejected when the graph takes none of its
    modality, or the part does not fit the node's edge."""
    modalities = [modality_of(p) for p in parts]
    try:
        graph.prefill_walk({"text", *modalities})
    except ValueError as exc:
        raise RequestRejected(str(exc), FIELD) from exc
    nodes = []
    for i, (part, modality) in enumerate(zip(parts, modalities, strict=True)):
        node = graph.encoder_for(modality).name
        placeholders = graph.edge_from(node).kind is EdgeKind.PLACEHOLDER_EMBEDDINGS
        if placeholders != bool(part.positions):
            want = "placeholder positions" if placeholders else "no placeholder positions"
            raise RequestRejected(f"part {i} ({modality}) must have {want} for this model",
                                  FIELD)
        nodes.append(node)
    return tuple(nodes)
