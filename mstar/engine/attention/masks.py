"""Attention masks of the torch backend, optionally limited to a sliding window.

A window ``w`` means a query at position p sees keys p-w+1 .. p (itself included), as
transformers' sliding-window masks do. Layers with different windows share one step's
metadata, so masks are built per window on first use (``MasksByWindow``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def decode_mask(lens: torch.Tensor, span: int, window: int | None,
                dtype: torch.dtype) -> torch.Tensor:
    """Additive [rows, 1, 1, span] mask for one query per row at position ``lens - 1``."""
    keys = torch.arange(span, device=lens.device)[None, :]
    masked = keys >= lens[:, None]
    if window is not None:
        masked |= keys < lens[:, None] - window
    # Additive float mask: cheaper than a boolean one in the CPU SDPA kernel.
    mask = torch.zeros(masked.shape, dtype=dtype, device=lens.device)
    mask.masked_fill_(masked, float("-inf"))
    return mask.view(len(lens), 1, 1, span)


def prefill_mask(q_len: int, ctx: int, window: int | None, device: torch.device,
                 spans: tuple[tuple[int, int], ...] = ()) -> torch.Tensor | None:
    """Boolean [q_len, ctx] mask for a chunk's queries (the last ``q_len`` of ``ctx``
    positions); None when plain causal attention over the chunk itself is exact.

    ``spans``: position runs [start, end) ending within ``ctx`` whose tokens also see the later
    tokens of their run (as transformers composes it: the window still applies)."""
    windowed = window is not None and window < ctx
    if ctx == q_len and not windowed and not spans:
        return None
    q_pos = torch.arange(ctx - q_len, ctx, device=device)[:, None]
    k_pos = torch.arange(ctx, device=device)[None, :]
    mask = k_pos <= q_pos
    for start, end in spans:
        mask |= (q_pos >= start) & (q_pos < end) & (k_pos >= start) & (k_pos < end)
    if windowed:
        mask &= k_pos > q_pos - window
    return mask


class MasksByWindow:
    """``get(window)`` builds a mask (or list of masks) once per window and reuses it."""

    def __init__(self, build: Callable[[int | None], object]) -> None:
        self.build = build
        self.built: dict[int | None, object] = {}

    def get(self, window: int | None):
        if window not in self.built:
            self.built[window] = self.build(window)
        return self.built[window]
