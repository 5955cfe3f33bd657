"""Gated DeltaNet token mixer (Qwen3.5's linear-attention layers) on per-sequence state slots.

Each sequence owns a slot in two per-layer tensors the engine allocates: ``conv_state``
[slots, conv_dim, kernel - 1] (the last inputs of the causal depthwise conv) and
``recurrent_state`` [slots, v_heads, k_dim, v_dim] (float32). A span that starts its sequence
begins from zeros; any other continues from the slot, so chunked prefill carries the state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mstar.models.layers import delta_rule


class GatedRMSNorm(nn.Module):
    """RMSNorm of each head's output, then times silu(gate) (in float32)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * xf.to(dtype) * F.silu(gate.float())).to(dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        if config.hidden_act != "silu":
            raise ValueError(f"unsupported hidden_act {config.hidden_act!r} (only 'silu')")
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.k_dim = config.linear_key_head_dim
        self.v_dim = config.linear_value_head_dim
        self.key_size = self.num_k_heads * self.k_dim
        self.value_size = self.num_v_heads * self.v_dim
        self.conv_dim = 2 * self.key_size + self.value_size
        self.kernel = config.linear_conv_kernel_dim
        hidden = config.hidden_size
        self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_size, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.num_v_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim,
                                bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_size, hidden, bias=False)
        # This layer's state slots, set by the engine after allocation.
        self.conv_state = torch.empty(0)
        self.recurrent_state = torch.empty(0)

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Per-slot shapes of (conv state, recurrent state)."""
        return (self.conv_dim, self.kernel - 1), (self.num_v_heads, self.k_dim, self.v_dim)

    def forward(self, hidden: torch.Tensor, attn_metadata) -> torch.Tensor:
        layout = attn_metadata.state_layout
        mixed = self._conv(self.in_proj_qkv(hidden), layout)
        q, k, v = mixed.split([self.key_size, self.key_size, self.value_size], dim=-1)
        q = q.reshape(-1, self.num_k_heads, self.k_dim)
        k = k.reshape(-1, self.num_k_heads, self.k_dim)
        v = v.reshape(-1, self.num_v_heads, self.v_dim)
        if self.num_v_heads != self.num_k_heads:  # each q/k head serves a group of v heads
            group = self.num_v_heads // self.num_k_heads
            q, k = q.repeat_interleave(group, dim=1), k.repeat_interleave(group, dim=1)
        q, k = delta_rule.l2_normalize(q.float()), delta_rule.l2_normalize(k.float())
        beta = self.in_proj_b(hidden).sigmoid()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(hidden).float() + self.dt_bias)
        out = self._mix(q, k, v, g, beta, layout).to(hidden.dtype)
        z = self.in_proj_z(hidden)
        out = self.norm(out.reshape(-1, self.v_dim), z.reshape(-1, self.v_dim))
        return self.out_proj(out.reshape(hidden.shape[0], -1))

    def _conv(self, x: torch.Tensor, layout) -> torch.Tensor:
        """Causal depthwise conv + SiLU over each sequence, continuing from its conv state."""
        weight = self.conv1d.weight  # [conv_dim, 1, kernel]
        out = torch.empty_like(x)
        nd = layout.num_decodes
        if nd:
            past = self.conv_state.index_select(0, layout.decode_slots)
            if layout.decode_keep is not None:
                past = past * layout.decode_keep
            window = torch.cat([past, x[:nd, :, None]], dim=-1)
            out[:nd] = (window * weight[:, 0]).sum(-1)
            self.conv_state.index_copy_(0, layout.decode_slots, window[..., 1:])
        for start, n, slot, fresh in layout.spans:
            past = self.conv_state[slot]
            seq = torch.cat([torch.zeros_like(past) if fresh else past,
                             x[start : start + n].transpose(0, 1)], dim=-1)
            out[start : start + n] = F.conv1d(seq[None], weight, groups=self.conv_dim)[0].T
            self.conv_state[slot] = seq[:, -(self.kernel - 1):]
        return F.silu(out)

    def _mix(self, q, k, v, g, beta, layout) -> torch.Tensor:
        """The gated delta rule: a recurrent step for decodes, the chunked form for spans."""
        out = torch.empty(*v.shape, dtype=torch.float32, device=v.device)
        nd = layout.num_decodes
        if nd:
            state = self.recurrent_state.index_select(0, layout.decode_slots)
            if layout.decode_keep is not None:
                state.mul_(layout.decode_keep[..., None])
            out[:nd] = delta_rule.recurrent_step(q[:nd], k[:nd], v[:nd], g[:nd], beta[:nd], state)
            self.recurrent_state.index_copy_(0, layout.decode_slots, state)
        for start, n, slot, fresh in layout.spans:
            rows = slice(start, start + n)
            initial = None if fresh else self.recurrent_state[slot]
            out[rows], self.recurrent_state[slot] = delta_rule.chunked(
                q[rows], k[rows], v[rows], g[rows], beta[rows], initial)
        return out
