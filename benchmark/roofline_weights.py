"""What one decode token reads and computes, counted from a loaded model (for benchmark/roofline.py).

Streamed (read in full once per decode step, whatever the batch): every tensor of every module a
token is multiplied through, i.e. the linears of any kind (nn.Linear, oneDNN-packed, the
bf16-weight kernel's, quantized q4 / int8 with their scales), their biases and the norms. Each
distinct tensor counts once, so a tied LM head that the quantized embedding shares counts once.

Gathered, not streamed: the token embedding (one row per token; when tied, the LM head streams the
same weight in full, as a oneDNN-packed copy in fp32 / bf16 or the very same int8 rows in int8 /
q4) and the rope table (one row per position). Their rows are left out, as is the KV cache, whose
reads grow with the context.

FLOPs: 2 per multiply-add of every linear, in x out per token, the LM head included. Attention's
(4 x context x q heads x head_dim per layer) depend on the context and are left out: about 3 % of
the built-in model's at 100 tokens of context.
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.models.layers.blocks import RotaryEmbedding
from mstar.models.layers.cpu_bf16_linear import Bf16Linear
from mstar.models.layers.cpu_linear import PackedLinear
from mstar.models.quant.formats import Q4Weight, QuantWeight
from mstar.models.quant.linear import QuantEmbedding, QuantLinear

GATHERED = (nn.Embedding, QuantEmbedding, RotaryEmbedding)
LINEARS = (nn.Linear, PackedLinear, Bf16Linear, QuantLinear)


def quantized_tensors(weight: QuantWeight) -> list[torch.Tensor]:
    """The tensors a quantized weight is stored in: q4 blocks (scales and minimums inside), or
    int8 values and their float32 scales."""
    return [weight.blocks] if isinstance(weight, Q4Weight) else [weight.weight, weight.scales]


def own_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The tensors ``module`` itself holds (not its children's): parameters, buffers and, for a
    quantized linear, its quantized weight (a plain attribute, not a buffer)."""
    tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
    if isinstance(module, QuantLinear):
        tensors += quantized_tensors(module.qweight)
    return tensors


def memory_key(tensor: torch.Tensor) -> tuple:
    """Equal for two tensors holding the same bytes: their address (a oneDNN-packed weight has no
    storage to ask, and no other tensor shares its bytes: the object itself)."""
    if tensor.is_mkldnn:
        return ("opaque", id(tensor))
    return ("memory", tensor.data_ptr(), tensor.nbytes)


def streamed_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Every distinct tensor a decode step reads in full (see the module docstring)."""
    seen: dict[tuple, torch.Tensor] = {}
    for module in model.modules():
        if isinstance(module, GATHERED):
            continue
        for tensor in own_tensors(module):
            seen.setdefault(memory_key(tensor), tensor)
    return list(seen.values())


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one decode step streams."""
    return sum(t.nbytes for t in streamed_tensors(model))


def linear_shape(module: nn.Module) -> tuple[int, int]:
    """(out_features, in_features) of one of LINEARS (a packed weight keeps its logical shape)."""
    if isinstance(module, PackedLinear):
        out_features, in_features = module.packed_weight.shape
        return out_features, in_features
    return module.out_features, module.in_features


def flops_per_token(model: nn.Module) -> int:
    """2 x the multiply-adds of every linear for one token."""
    return sum(2 * out * inp for out, inp in
               (linear_shape(m) for m in model.modules() if isinstance(m, LINEARS)))


def dtypes(model: nn.Module) -> dict[str, int]:
    """Streamed bytes by storage dtype (what the table's note shows: uint8 q4 blocks, int8, ...)."""
    out: dict[str, int] = {}
    for t in streamed_tensors(model):
        name = str(t.dtype).removeprefix("torch.")
        out[name] = out.get(name, 0) + t.nbytes
    return out
