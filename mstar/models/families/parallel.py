"""Tensor parallelism of the Llama-layout decoders (Llama, Qwen2, Qwen3 and the built-in model).

Each rank builds the model from a *local* config (its share of the heads, of the MLP width and of
the vocabulary), then four modules are swapped for their parallel forms:

- q/k/v and gate/up stay plain (column-parallel) linears: each rank holds its rows;
- ``o_proj`` and ``down_proj`` become row-parallel: each rank holds its columns, the partial
  outputs are summed with an all-reduce, and the bias is added once, after the sum;
- the embedding is vocabulary-parallel (ids outside a rank's rows give zeros; all-reduce);
- the LM head holds a rank's vocabulary rows; its logits are all-gathered, so every rank sees the
  same full logits and samples the same token with its identically seeded generators.

KV heads are split like the query heads; when there are fewer KV heads than ranks each one is
replicated on the ranks whose query heads read it. The KV cache holds only the local heads.
Checkpoint tensors are sliced as they are loaded (``shard_tensor``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

# Families whose layers are exactly the Llama layout handled here.
TP_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


@dataclass(frozen=True)
class TensorParallel:
    """This rank's place in its tensor-parallel group; collectives go through ``group``."""

    rank: int
    size: int
    group: Any = None  # a torch.distributed ProcessGroup (None: the default group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x, group=self.group)
        return x

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


@dataclass(frozen=True)
class Shapes:
    """The full model's sizes a rank's slices are cut from."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def of(cls, config) -> Shapes:
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return cls(heads, config.num_key_value_heads, head_dim, config.intermediate_size,
                   config.vocab_size)


def check_divisible(config, size: int) -> None:
    """A clear start-up error when ``size`` ranks cannot split this model."""
    archs = getattr(config, "architectures", None) or ["?"]
    if archs[0] not in TP_ARCHITECTURES:
        raise ValueError(f"tensor_parallel_size={size}: the {archs[0]} family does not support "
                         f"tensor parallelism yet (supported: {', '.join(TP_ARCHITECTURES)})")
    s = Shapes.of(config)
    if s.num_heads % size:
        raise ValueError(f"tensor_parallel_size={size} does not divide the model's "
                         f"{s.num_heads} attention heads")
    if s.num_kv_heads % size and size % s.num_kv_heads:
        raise ValueError(f"tensor_parallel_size={size} and the model's {s.num_kv_heads} KV heads: "
                         "one must divide the other")
    if s.intermediate % size:
        raise ValueError(f"tensor_parallel_size={size} does not divide the model's "
                         f"intermediate_size={s.intermediate}")


def local_config(config, size: int):
    """The config of one rank's share: heads, KV heads, MLP width and vocab rows divided."""
    s = Shapes.of(config)
    local = copy.deepcopy(config)
    local.num_attention_heads = s.num_heads // size
    local.num_key_value_heads = max(s.num_kv_heads // size, 1)
    local.head_dim = s.head_dim
    local.intermediate_size = s.intermediate // size
    local.vocab_size = -(-s.vocab // size)
    return local


class RowParallelLinear(nn.Module):
    """y = sum over ranks of x_r @ W_r^T, plus the bias once."""

    def __init__(self, linear: nn.Linear, tp: TensorParallel) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.reduce(self.partial(x))

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's term of the sum (a LoRA delta adds its own term here, before the sum)."""
        return nn.functional.linear(x, self.weight)

    def reduce(self, y: torch.Tensor) -> torch.Tensor:
        """The ranks' terms summed, plus the bias once."""
        y = self.tp.all_reduce(y)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [rank * n, (rank + 1) * n) of the table; ids elsewhere contribute zeros."""

    def __init__(self, embedding: nn.Embedding, tp: TensorParallel) -> None:
        super().__init__()
        self.weight = embedding.weight
        self.tp = tp

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        rows = self.weight.shape[0]
        local = ids - self.tp.rank * rows
        outside = (local < 0) | (local >= rows)
        out = nn.functional.embedding(local.masked_fill(outside, 0), self.weight)
        return self.tp.all_reduce(out.masked_fill(outside.unsqueeze(-1), 0.0))


class ParallelLMHead(nn.Module):
    """A rank's vocabulary rows; the logits of all ranks are gathered (padding rows dropped)."""

    def __init__(self, lm_head: nn.Linear, tp: TensorParallel, vocab: int) -> None:
        super().__init__()
        self.weight = lm_head.weight
        self.tp = tp
        self.vocab = vocab

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = nn.functional.linear(hidden, self.weight)
        return self.tp.all_gather_last(logits)[..., : self.vocab]


def build_sharded(cls: type, config, tp: TensorParallel) -> nn.Module:
    """The rank's model (call on the meta device): local sizes, parallel modules swapped in."""
    check_divisible(config, tp.size)
    model = cls(local_config(config, tp.size))
    model.tp_shapes = Shapes.of(config)
    model.tp = tp
    for layer in model.model.layers:
        layer.self_attn.o_proj = RowParallelLinear(layer.self_attn.o_proj, tp)
        layer.mlp.down_proj = RowParallelLinear(layer.mlp.down_proj, tp)
    model.model.embed_tokens = VocabParallelEmbedding(model.model.embed_tokens, tp)
    model.lm_head = ParallelLMHead(model.lm_head, tp, config.vocab_size)
    return model


def shard_tensor(model: nn.Module, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """This rank's slice of the checkpoint tensor ``name`` (a tensor every rank keeps whole is
    returned as is)."""
    if name.endswith(("embed_tokens.weight", "lm_head.weight")):
        return _vocab_rows(tensor, model.tp, -(-model.tp_shapes.vocab // model.tp.size))
    cut = shard_cut(model, name)
    return tensor if cut is None else tensor.narrow(*cut)


def shard_cut(model: nn.Module, name: str) -> tuple[int, int, int] | None:
    """(dim, start, length) of this rank's slice of the projection weight ``name`` (checkpoint
    name): dim 0 for a column-parallel one (q/k/v, gate/up: output rows), dim 1 for a
    row-parallel one (o_proj, down_proj: input columns); None for a tensor kept whole. LoRA
    adapters cut their pairs by the same rule (``mstar.models.lora.adapter``)."""
    tp: TensorParallel = model.tp
    s: Shapes = model.tp_shapes
    part = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else name
    if part == "q_proj":
        return _rows(tp.rank, s.num_heads * s.head_dim // tp.size)
    if part in ("k_proj", "v_proj"):
        local_kv = max(s.num_kv_heads // tp.size, 1)
        first_head = tp.rank * s.num_kv_heads // tp.size  # a replicated head: the one read here
        return 0, first_head * s.head_dim, local_kv * s.head_dim
    if part in ("gate_proj", "up_proj"):
        return _rows(tp.rank, s.intermediate // tp.size)
    if name.endswith("o_proj.weight"):
        return _cols(tp.rank, s.num_heads * s.head_dim // tp.size)
    if name.endswith("down_proj.weight"):
        return _cols(tp.rank, s.intermediate // tp.size)
    return None


def _rows(rank: int, n: int) -> tuple[int, int, int]:
    return 0, rank * n, n


def _cols(rank: int, n: int) -> tuple[int, int, int]:
    return 1, rank * n, n


def _vocab_rows(tensor: torch.Tensor, tp: TensorParallel, n: int) -> torch.Tensor:
    """Rows of the rank's vocabulary shard, zero-padded when the vocab does not divide evenly."""
    rows = tensor[tp.rank * n : (tp.rank + 1) * n]
    if rows.shape[0] == n:
        return rows
    pad = tensor.new_zeros((n - rows.shape[0], *tensor.shape[1:]))
    return torch.cat([rows, pad])
