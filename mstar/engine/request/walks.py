"""A request's prefill walk through the model's graph, checked when it is added: every media part
goes to the encoder node of its modality, and its shape suits what that node's edge carries
(placeholder rows need placeholder positions; cross-attention memory has none)."""

from __future__ import annotations

from mstar.engine.request.errors import RequestRejected
from mstar.graph import EdgeKind, WalkGraph
from mstar.graph.speech import ROWS
from mstar.models.media_part import MediaPart, modality_of
from mstar.models.speech.row_feed import RowFeed

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


def check_feed(graph: WalkGraph, feed: RowFeed | None, num_prompt_tokens: int) -> None:
    """A request carries embedding rows (``feed``) exactly when the graph's language model reads
    them (``ROWS``: Qwen3-Omni's talker), one prefill row per prompt position."""
    reads_rows = graph.language_model.modality == ROWS
    if reads_rows != (feed is not None):
        want = "needs its embedding rows (a RowFeed)" if reads_rows else "reads no embedding rows"
        raise RequestRejected(f"this model {want}", "feed")
    if feed is not None and len(feed.prompt) != num_prompt_tokens:
        raise RequestRejected(f"the feed has {len(feed.prompt)} prompt rows for "
                              f"{num_prompt_tokens} prompt positions", "feed")
