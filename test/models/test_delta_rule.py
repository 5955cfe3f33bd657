"""The gated delta rule: chunked (prefill) and recurrent (decode) forms agree with each other,
across span boundaries, and with transformers' reference implementations."""

from __future__ import annotations

import torch
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

from mstar.models.layers import delta_rule


def _inputs(length=150, heads=4, k_dim=16, v_dim=8):
    torch.manual_seed(0)
    q = delta_rule.l2_normalize(torch.randn(length, heads, k_dim))
    k = delta_rule.l2_normalize(torch.randn(length, heads, k_dim))
    return q, k, torch.randn(length, heads, v_dim), -torch.rand(length, heads), \
        torch.rand(length, heads)


def test_chunked_matches_transformers_and_carries_state_across_spans():
    q, k, v, g, beta = _inputs()
    ref, ref_state = hf.torch_chunk_gated_delta_rule(
        q[None], k[None], v[None], g[None], beta[None], output_final_state=True)
    out, state = delta_rule.chunked(q, k, v, g, beta, None)
    torch.testing.assert_close(out, ref[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(state, ref_state[0], rtol=0, atol=1e-6)
    # Split at 70 (inside the second 64-token chunk): the state hands over exactly.
    first, mid = delta_rule.chunked(q[:70], k[:70], v[:70], g[:70], beta[:70], None)
    second, end = delta_rule.chunked(q[70:], k[70:], v[70:], g[70:], beta[70:], mid)
    torch.testing.assert_close(torch.cat([first, second]), ref[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(end, ref_state[0], rtol=0, atol=1e-5)


def test_recurrent_steps_match_the_chunked_form_and_transformers():
    q, k, v, g, beta = _inputs(length=40)
    ref, _ = hf.torch_recurrent_gated_delta_rule(
        q[None], k[None], v[None], g[None], beta[None], output_final_state=True)
    # Two sequences decoding side by side; the second starts from the first's state at 10.
    _, state10 = delta_rule.chunked(q[:10], k[:10], v[:10], g[:10], beta[:10], None)
    states = torch.stack([torch.zeros_like(state10), state10])
    outs = []
    for t in range(30):
        rows = [t, t + 10]
        outs.append(delta_rule.recurrent_step(q[rows], k[rows], v[rows], g[rows], beta[rows],
                                              states))
    outs = torch.stack(outs)  # [30, 2, H, Dv]
    torch.testing.assert_close(outs[:, 0], ref[0, :30], rtol=0, atol=1e-6)
    chunked, final = delta_rule.chunked(q, k, v, g, beta, None)
    torch.testing.assert_close(outs[:, 1], chunked[10:], rtol=0, atol=1e-5)
    torch.testing.assert_close(states[1], final, rtol=0, atol=1e-5)
