"""Walk graphs: what a model is made of and which path each request takes through it."""

from mstar.graph.walk_graph import Edge, Node, NodeKind, Walk, WalkGraph, text_only, with_encoder

__all__ = ["Edge", "Node", "NodeKind", "Walk", "WalkGraph", "text_only", "with_encoder"]
