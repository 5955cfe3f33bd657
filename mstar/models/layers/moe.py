"""Mixture-of-experts MLP: top-k softmax routing, tokens grouped by expert.

Each token's (token, expert) pairs are sorted by expert, so every expert runs once on one
contiguous slice of its tokens; outputs are weighted and summed back with one index_add.
The router renormalises the top-k weights to sum to 1 when the config says so
(``norm_topk_prob``). A shared expert (Qwen2-MoE, Qwen3-Omni's talker) is a dense MLP every token
runs, its output scaled by ``sigmoid(shared_expert_gate(x))`` and added to the routed sum.
"""

from __future__ import annotations

import torch
from torch import nn


class ExpertMLP(nn.Module):
    """SiLU-gated MLP with the checkpoint's unfused gate/up/down projections."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                 normalize_top_k: bool, shared_intermediate_size: int = 0) -> None:
        """``shared_intermediate_size``: the shared expert's width; 0: no shared expert."""
        super().__init__()
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.experts = nn.ModuleList(
            ExpertMLP(hidden_size, intermediate_size) for _ in range(num_experts)
        )
        self.top_k = top_k
        self.normalize_top_k = normalize_top_k
        if shared_intermediate_size:
            self.shared_expert = ExpertMLP(hidden_size, shared_intermediate_size)
            self.shared_expert_gate = nn.Linear(hidden_size, 1, bias=False)
        self.has_shared_expert = bool(shared_intermediate_size)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [T, k] in the activation dtype, expert ids [T, k])."""
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.normalize_top_k:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.route(x)
        flat_experts = experts.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        token_of = order // self.top_k  # token row of each sorted (token, expert) pair
        counts = torch.bincount(flat_experts, minlength=len(self.experts)).tolist()
        grouped = x.index_select(0, token_of)
        out = torch.empty_like(grouped)
        start = 0
        for expert, count in zip(self.experts, counts, strict=True):
            if count:
                out[start : start + count] = expert(grouped[start : start + count])
            start += count
        out *= weights.reshape(-1, 1)[order]
        routed = torch.zeros_like(x).index_add_(0, token_of, out)
        if not self.has_shared_expert:
            return routed
        return routed + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
