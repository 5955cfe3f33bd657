"""The gated delta rule (Gated DeltaNet's recurrence), in float32 torch.

Per head, with a state S [k_dim, v_dim], each token t does::

    S <- exp(g_t) * S
    S <- S + k_t (beta_t * (v_t - S^T k_t))^T      (the delta rule: write only the error)
    o_t = S^T q_t

``recurrent_step`` runs one token for a batch of sequences (decode). ``chunked`` runs a whole
span of one sequence: within a chunk of C tokens the C writes are one triangular solve
(WY form) and the reads are matmuls; only the chunk-to-chunk state hand-over is sequential.
Queries and keys arrive L2-normalized; queries are scaled by 1/sqrt(k_dim) here.
"""

from __future__ import annotations

import torch

CHUNK = 64


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def recurrent_step(q, k, v, g, beta, state) -> torch.Tensor:
    """One token per sequence. q, k: [N, H, Dk]; v: [N, H, Dv]; g, beta: [N, H];
    state: [N, H, Dk, Dv] float32, updated in place. Returns o: [N, H, Dv] (float32)."""
    q = q.float() * q.shape[-1] ** -0.5
    k, v = k.float(), v.float()
    state.mul_(g.float().exp()[..., None, None])
    error = v - (state * k[..., None]).sum(dim=-2)
    state.add_(k[..., None] * (error * beta.float()[..., None])[..., None, :])
    return (state * q[..., None]).sum(dim=-2)


def chunked(q, k, v, g, beta, state: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A span of L tokens of one sequence. q, k: [L, H, Dk]; v: [L, H, Dv]; g, beta: [L, H];
    state: [H, Dk, Dv] float32 or None (zeros). Returns (o [L, H, Dv], final state), float32."""
    length, heads, k_dim = k.shape
    v_dim = v.shape[-1]
    pad = -length % CHUNK
    n = (length + pad) // CHUNK

    def blocks(x: torch.Tensor) -> torch.Tensor:  # [L, H, ...] -> [H, n, C, ...], zero-padded
        x = x.float().transpose(0, 1)
        x = torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, pad))
        return x.reshape(heads, n, CHUNK, *x.shape[2:])

    q = blocks(q) * k_dim ** -0.5
    k, v, g, beta = blocks(k), blocks(v), blocks(g), blocks(beta)
    decay = g.cumsum(dim=-1)  # log of the decay from the chunk start through each token
    causal = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).tril()
    # pair[i, j] = decay from token j to token i (i >= j), else 0.
    pair = (decay[..., :, None] - decay[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    k_beta = k * beta[..., None]
    # (I + A) W = rhs with A[i, j] = beta_i * pair[i, j] * k_i.k_j strictly below the diagonal.
    system = (k_beta @ k.transpose(-1, -2)) * pair
    system = system.tril(-1) + torch.eye(CHUNK, device=q.device)
    values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False)
    keys_in = torch.linalg.solve_triangular(system, k_beta * decay.exp()[..., None], upper=False)
    scores = (q @ k.transpose(-1, -2)) * pair  # intra-chunk reads
    q_decayed = q * decay.exp()[..., None]
    k_to_end = k * (decay[..., -1:] - decay).exp()[..., None]
    chunk_decay = decay[..., -1].exp()[..., None, None]
    s = torch.zeros(heads, k_dim, v_dim, device=q.device) if state is None else state.float()
    out = torch.empty(heads, n, CHUNK, v_dim, device=q.device)
    for c in range(n):
        writes = values[:, c] - keys_in[:, c] @ s  # each token's delta, given the chunk's start
        out[:, c] = q_decayed[:, c] @ s + scores[:, c] @ writes
        s = s * chunk_decay[:, c] + k_to_end[:, c].transpose(-1, -2) @ writes
    return out.reshape(heads, n * CHUNK, v_dim)[:, :length].transpose(0, 1), s
