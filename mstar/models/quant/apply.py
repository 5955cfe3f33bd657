"""Swaps a loaded model's linear layers for weight-only quantized ones (MSTAR_QUANTIZATION).

Choice for the LM head and the embeddings: the LM head is the most sensitive layer and the
largest (vocab x hidden), so both ``int8`` and ``q4`` store it as per-output-channel int8, as
llama.cpp's own Q4 files do (their token embedding is Q8_0). When the embeddings are tied to the
LM head, the embedding lookup reads the same int8 rows and dequantizes only the looked-up tokens,
so the dense table is dropped; untied embeddings stay dense (they are gathered, never streamed).
Layers whose input width is not a multiple of 32 stay dense.
"""

from __future__ import annotations

import structlog
from torch import nn

from mstar.models.quant.formats import Q4_BLOCK, QuantWeight, quantize_int8, quantize_q4
from mstar.models.quant.linear import QuantEmbedding, QuantLinear

log = structlog.get_logger(__name__)

MODES = ("int8", "q4")
LM_HEAD = "lm_head"


def quantize_dense(model: nn.Module, mode: str, skip: set[str]) -> dict[str, QuantWeight]:
    """Quantized weights for every eligible nn.Linear of ``model`` not in ``skip``, by module path."""
    if mode not in MODES:
        raise ValueError(f"unknown quantization {mode!r}; expected one of {MODES}")
    weights = {}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or module.in_features % Q4_BLOCK or name in skip:
            continue
        head = name.rsplit(".", 1)[-1] == LM_HEAD
        weights[name] = quantize_q4(module.weight) if mode == "q4" and not head else \
            quantize_int8(module.weight)
    return weights


def install_quantized(model: nn.Module, weights: dict[str, QuantWeight], native: bool,
                      copy: bool = False) -> None:
    """Replace each named linear by a QuantLinear; a tied embedding reads the quantized LM head.
    ``copy`` (with ``native``): each also holds oneDNN's bf16 copy for wide batches."""
    for name, weight in weights.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        bias = getattr(parent.get_submodule(child), "bias", None)
        setattr(parent, child, QuantLinear(weight, bias, "native" if native else "reference",
                                           copy=copy and native, logits=child == LM_HEAD))
    if getattr(model, "tie_word_embeddings", False) and LM_HEAD in weights:
        dtype = model.model.norm.weight.dtype
        model.model.embed_tokens = QuantEmbedding(weights[LM_HEAD], dtype)
    log.info("model_quantized", layers=len(weights), native_kernels=native, bf16_copy=copy and native)
