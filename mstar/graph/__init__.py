"""Walk graphs: what a model is made of and which path each request takes through it."""

from mstar.graph.chunks import ChunkPolicy, Window, every_token, frame_windows
from mstar.graph.kinds import EdgeKind, NodeKind
from mstar.graph.walk_graph import (
    Edge,
    Emit,
    Node,
    Walk,
    WalkGraph,
    cross_attention_encoder,
    text_only,
    with_encoder,
)

__all__ = ["ChunkPolicy", "Edge", "EdgeKind", "Emit", "Node", "NodeKind", "Walk", "WalkGraph",
           "Window", "cross_attention_encoder", "every_token", "frame_windows", "text_only",
           "with_encoder"]
