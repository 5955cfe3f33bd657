"""Attention backends behind a small registry.

A backend chooses the per-layer KV cache layout (``kv_cache_shape``) and turns
backend-agnostic ``AttentionInputs`` into metadata whose ``attend(q, k, v, kv_cache)``
writes the new K/V into the paged cache and returns the attention output, so models
never depend on a particular backend. Metadata may be built a step ahead;
``begin_forward()`` runs right before its forward, in execution order.
"""

from __future__ import annotations

import importlib

from mstar.engine.attention.inputs import AttentionInputs

_BACKENDS = {"torch": ("mstar.engine.attention.torch_backend", "TorchAttentionBackend")}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {sorted(_BACKENDS)}")
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


__all__ = ["AttentionInputs", "get_backend"]
