"""Walk graphs: what a model is made of and which path each request takes through it."""

from mstar.graph.walk_graph import (
    Edge,
    EdgeKind,
    Node,
    NodeKind,
    Walk,
    WalkGraph,
    cross_attention_encoder,
    text_only,
    with_encoder,
)

__all__ = ["Edge", "EdgeKind", "Node", "NodeKind", "Walk", "WalkGraph", "cross_attention_encoder",
           "text_only", "with_encoder"]
