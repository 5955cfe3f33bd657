"""A Llama-layout decoder stack on a decode-only step in one native call.

``fused_ops.decode_layer`` runs one layer in one call; ``decode_stack`` (``kernels/cpu/csrc/
decode_layers.h``) runs them all, from the first layer's input norm to the final add + norm, so a
decode step crosses from Python to C++ once for the layers instead of once per layer (and skips
the per-layer module calls around it). It calls the same C++ functions in the same order, so it
computes the same bits. ``DecodeStack`` gathers every layer's parameters once, as flat lists
held by a C++ object, so a step passes one argument for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mstar.models.layers.fused_ops import LayerLinears


@dataclass(frozen=True)
class StackLayer:
    """One layer's part of the stack: its two norms, linears and attention module (which holds
    the layer's KV cache, window, scale and head counts)."""

    input_norm: nn.Module
    post_norm: nn.Module
    linears: LayerLinears
    attn: nn.Module


class DecodeStack:
    """Every layer's parameters as ``decode_layers`` takes them (built once per model)."""

    def __init__(self, layers: list[StackLayer], final_norm: nn.Module) -> None:
        norms = [w for layer in layers for w in (layer.input_norm.weight, layer.post_norm.weight)]
        attn = [layer.attn for layer in layers]
        self.kv_caches = [a.kv_cache for a in attn]
        # held by C++ (decode_layers.h): a step passes one object, not every layer's tensors
        self.native = torch.classes.mstar_cpu.DecodeStack(
            [*norms, final_norm.weight], [k for layer in layers for k in layer.linears.kinds],
            [w for layer in layers for w in layer.linears.weights],
            [n for layer in layers for n in layer.linears.in_features], self.kv_caches,
            [a.sliding_window or 0 for a in attn],
            [a.head_dim ** -0.5 if a.scale is None else a.scale for a in attn],
            final_norm.eps, attn[0].num_heads, attn[0].num_kv_heads)
        self._first = layers[0]

    @staticmethod
    def of(layers: list[StackLayer], final_norm: nn.Module) -> DecodeStack | None:
        """None unless the layers agree on what one call takes once: the norms' eps, the head
        counts and the linears' activation dtypes."""
        first = layers[0]
        same = all(
            layer.input_norm.eps == layer.post_norm.eps == final_norm.eps
            and (layer.attn.num_heads, layer.attn.num_kv_heads)
            == (first.attn.num_heads, first.attn.num_kv_heads)
            and layer.linears.dtypes == first.linears.dtypes
            for layer in layers)
        return DecodeStack(layers, final_norm) if same else None

    def current(self) -> bool:
        """The KV caches gathered are still the layers' (they are allocated once, together)."""
        return self._first.attn.kv_cache is self.kv_caches[0]

    def run(self, hidden: torch.Tensor) -> bool:
        """The stack can run on these decode rows (``LayerLinears.run`` of every layer)."""
        return self._first.linears.run(hidden)  # the layers share its dtype and row limit


def decode_layers(stack: DecodeStack, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  attn_metadata) -> torch.Tensor:
    """Every layer on the decode rows ``hidden`` (updated in place, as the fused ops do) and the
    final norm: the model's output hidden states."""
    meta = attn_metadata
    return torch.ops.mstar_cpu.decode_stack(stack.native, hidden, cos, sin, meta.slot_mapping,
                                              meta.decode_tables, meta.decode_lens)
