"""oneDNN-prepacked linear layers for fp32 (and bf16 where the CPU has native bf16) on CPU.

Prepacked weights let oneDNN skip per-call reordering; on small decode batches this
runs the projections and the LM head 1.4-2.5x faster than the default BLAS path.

oneDNN packs bf16 only with native bf16 instructions (avx512_bf16 or AMX); on an AVX2-only CPU
a bf16 model runs mstar's bf16-weight kernel instead (cpu_bf16_linear.py), and on a CPU with
avx512_bf16 the decode rows run mstar's vdpbf16ps kernel, the wider batches this module's packed
weight (``Bf16Linear``). MSTAR_DTYPE=auto picks bf16 where it is native and where that kernel
runs (AVX2 + FMA), float32 with quantized weights (``cpu_bf16_linear.cpu_auto_dtype`` is the one
rule); bf16's perplexity is within the quality gate either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

# Batch size the weight layout is tuned for: a typical decode batch. Any batch works.
_PACK_BATCH_HINT = 32


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's packed copy of a linear's weight [N, K] (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_BATCH_HINT)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ W^T (+ bias) with ``packed`` = pack_weight(W)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.out_features = linear.out_features
        self.register_buffer("packed_weight", pack_weight(linear.weight), persistent=False)
        bias = None if linear.bias is None else linear.bias.detach()
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.packed_weight, self.bias)


def native_bf16() -> bool:
    """True when this CPU runs bf16 matmuls natively (avx512_bf16 or AMX) and oneDNN is there."""
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    return native and torch.backends.mkldnn.is_available()



def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    return dtype == torch.float32 or (dtype == torch.bfloat16 and native_bf16())


def replace_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module],
                    keep: Callable[[nn.Linear], bool] = lambda linear: False) -> int:
    """Swap every nn.Linear (not ``keep``) for ``make(linear)``; returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            # nn.MultiheadAttention (e.g. a SigLIP pooling head) reads its out_proj's weight.
            if (isinstance(child, nn.Linear) and not isinstance(parent, nn.MultiheadAttention)
                    and not keep(child)):
                setattr(parent, name, make(child))
                swapped += 1
    return swapped


def pack_linears(model: nn.Module) -> None:
    """Swap every nn.Linear for a PackedLinear (tied embeddings keep their own weight)."""
    replace_linears(model, PackedLinear)
