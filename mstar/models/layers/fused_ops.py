"""Fused CPU ops for the per-token work around the linears, one native call each.

RMSNorm (alone, in place, or with the residual add before it, in place on both as vLLM's
``fused_add_rms_norm``), SiLU / GELU-tanh times up on the fused gate/up output, rope in place on
the q and k heads, the paged KV-cache write and the paged decode attention replace several torch
ops apiece. The kernels (``kernels/cpu/csrc/norm_ops.h``, ``activation_ops.h``, ``rope_ops.h``,
``kv_cache_ops.h``, ``decode_attention.h``) are built into ``torch.ops.mstar_cpu`` with the
quantized kernels. They compute in float32 and round where
the torch path rounds, for float32 and bfloat16 activations.

The loader turns them on for a CPU model when the native kernels load and the CPU has AVX2
(``use_native_ops``): each module that has a fused form carries ``native_ops``. Every module
keeps its torch path, the tests' reference, for other devices, other CPUs and failed builds.
"""

from __future__ import annotations

import torch
from torch import nn

from mstar.kernels.cpu.build import LIBRARY
from mstar.kernels.cpu.levels import Feature
from mstar.models.layers.cpu_bf16_linear import Bf16Linear
from mstar.models.quant.formats import Q4Weight
from mstar.models.quant.linear import WIDE_BATCH, QuantLinear

_fakes_registered: list[bool] = []


def native_ops_usable(device: torch.device) -> bool:
    """True when the fused ops can run for a model on ``device`` (the native kernels must be
    loaded already, see ``mstar.kernels.cpu.build.native_kernels``)."""
    ops = getattr(torch.ops, LIBRARY, None)
    return (device.type == "cpu" and ops is not None and hasattr(ops, "rms_norm")
            and Feature.AVX2 in Feature(ops.cpu_features()))


def use_native_ops(model: nn.Module, enabled: bool = True) -> int:
    """Switch every module of ``model`` that has a fused form to it (or back); returns how many."""
    if enabled:
        _register_fakes()
    switched = 0
    for module in model.modules():
        if hasattr(type(module), "native_ops"):
            module.native_ops = enabled
            switched += 1
    return switched


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: bool) -> torch.Tensor:
    return torch.ops.mstar_cpu.rms_norm(x, weight, eps, offset)


def rms_norm_(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: bool) -> torch.Tensor:
    """Normalizes x in place (a view with evenly spaced rows, e.g. the q heads of a qkv output)."""
    torch.ops.mstar_cpu.rms_norm_inplace(x, weight, eps, offset)
    return x


def add_rms_norm_(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                  offset: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual), x + residual), written into (x, residual)."""
    torch.ops.mstar_cpu.fused_add_rms_norm(x, residual, weight, eps, offset)
    return x, residual


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mstar_cpu.silu_and_mul(x)


def gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mstar_cpu.gelu_tanh_and_mul(x)


def rope_(qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates the leading ``cos.shape[-1]`` dims of every head of qk [tokens, heads, head_dim]
    in place (``RotaryEmbedding``'s cos and sin rows)."""
    torch.ops.mstar_cpu.rotary_embedding(qk, cos, sin)
    return qk


def write_kv_cache_(kv_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    slot_mapping: torch.Tensor) -> None:
    """The torch attention backend's cache write ([2, kv_heads, blocks, block_size, head_dim]):
    token t's K and V heads into slot ``slot_mapping[t]``, in one call."""
    torch.ops.mstar_cpu.write_kv_cache(kv_cache, k, v, slot_mapping)


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """Each row's argmax, ``logits.argmax(dim=-1)``'s answer (the first index of the largest
    value, a NaN beating every number): the native kernel for float32 [rows, vocab] on a CPU
    where the fused ops run (``argmax_ops.h``), else torch's."""
    if (logits.dtype == torch.float32 and logits.dim() == 2 and logits.stride(-1) == 1
            and native_ops_usable(logits.device)):
        return torch.ops.mstar_cpu.greedy_argmax(logits)
    return logits.argmax(dim=-1)


def paged_decode_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           context_lens: torch.Tensor, window: int | None,
                           scale: float | None) -> torch.Tensor:
    """One query token per sequence (q [seqs, q_heads, head_dim], GQA) attends to its first
    ``context_lens[s]`` cached tokens, read from the paged cache by ``block_tables`` [seqs,
    max_blocks] (int64); ``window``: only the last ``window`` of them; ``scale`` defaults to
    1/sqrt(head_dim). Float32 softmax; the output is in q's dtype."""
    return torch.ops.mstar_cpu.paged_decode_attention(
        q, kv_cache, block_tables, context_lens, window,
        q.shape[-1] ** -0.5 if scale is None else scale)


class LayerLinears:
    """The four linears of a Llama-layout layer (qkv, o, gate_up, down) as ``decode_layer``
    takes them: kind (0 q4, 1 int8, 2 bf16), weight, scales (empty unless int8), in_features;
    and the activation dtypes they take (q4 and int8: float32 or bfloat16, which decode_layer.h
    widens to float32 for the integer dot; bf16: bfloat16)."""

    def __init__(self, kinds: list[int], weights: list[torch.Tensor], in_features: list[int],
                 dtypes: frozenset[torch.dtype], max_rows: int) -> None:
        self.kinds, self.weights, self.in_features, self.dtypes = kinds, weights, in_features, dtypes
        self.max_rows = max_rows  # the most decode rows every linear's kernel takes

    @staticmethod
    def of(linears: list[nn.Module]) -> LayerLinears | None:
        """None unless every linear runs a native kernel without bias, with an activation dtype
        they all take."""
        kinds, weights, max_rows = [], [], WIDE_BATCH - 1
        dtypes = frozenset({torch.float32, torch.bfloat16})
        for linear in linears:
            if getattr(linear, "bias", None) is not None:
                return None
            if isinstance(linear, QuantLinear) and linear.mode == "native":
                max_rows = min(max_rows, linear.kernel_rows or max_rows)  # the bf16 copy's above
                w = linear.qweight
                q4 = isinstance(w, Q4Weight)
                kinds.append(0 if q4 else 1)
                weights += [w.blocks, torch.empty(0)] if q4 else [w.weight, w.scales]
            elif isinstance(linear, Bf16Linear) and linear.level == -1:
                kinds.append(2)
                weights += [linear.weight, torch.empty(0)]
                dtypes &= {torch.bfloat16}
                max_rows = min(max_rows, linear.kernel_rows or max_rows)  # oneDNN's rows above
            else:
                return None
        return LayerLinears(kinds, weights, [m.in_features for m in linears], dtypes, max_rows)

    def run(self, hidden: torch.Tensor) -> bool:
        """The layer can run on these decode rows."""
        return hidden.dtype in self.dtypes and hidden.shape[0] <= self.max_rows


def decode_layer(hidden: torch.Tensor, residual: torch.Tensor, normed: bool, input_norm: nn.Module,
                 post_norm: nn.Module, linears: LayerLinears, cos: torch.Tensor, sin: torch.Tensor,
                 kv_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                 context_lens: torch.Tensor, window: int | None, scale: float | None,
                 num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """A Llama-layout decoder layer on decode rows in one native call (csrc/decode_layer.h): the
    input add + norm (skipped when ``normed``: the first layer), qkv, rope, the cache write,
    the paged decode attention, o, the add + norm, gate_up, silu * up and down. Updates
    ``residual`` (and ``hidden``) in place, as the fused ops do; returns the MLP's output."""
    return torch.ops.mstar_cpu.decode_layer(
        hidden, residual, normed, input_norm.weight, post_norm.weight, input_norm.eps,
        linears.kinds, linears.weights, linears.in_features, cos, sin, kv_cache, slot_mapping,
        block_tables, context_lens, window, kv_cache.shape[-1] ** -0.5 if scale is None else scale,
        num_heads, num_kv_heads)


def _register_fakes() -> None:
    """Shapes for torch.compile (MSTAR_COMPILE traces the MLPs and their activation)."""
    if _fakes_registered:
        return
    _fakes_registered.append(True)

    def gated(x):
        return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)

    torch.library.register_fake(f"{LIBRARY}::silu_and_mul", gated)
    torch.library.register_fake(f"{LIBRARY}::gelu_tanh_and_mul", gated)
    torch.library.register_fake(f"{LIBRARY}::rms_norm",
                                lambda x, weight, eps, offset: torch.empty_like(x))
