"""Attention backends behind a small registry.

A backend chooses the per-layer KV cache layout (``kv_cache_shape``) and turns
backend-agnostic ``AttentionInputs`` into metadata whose ``attend(q, k, v, kv_cache)``
writes the new K/V into the paged cache and returns the attention output, so models
never depend on a particular backend. Metadata may be built a step ahead;
``begin_forward()`` runs right before its forward, in execution order.
"""

from __future__ import annotations

import importlib

import torch

from mstar.engine.attention.inputs import AttentionInputs
from mstar.kernels import triton_available, triton_interpreting
from mstar.settings import WorkerSettings

_BACKENDS = {
    "torch": ("mstar.engine.attention.torch_backend", "TorchAttentionBackend"),
    "triton": ("mstar.engine.attention.triton_backend", "TritonAttentionBackend"),
}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; available: {sorted(_BACKENDS)}")
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)()


# What models may ask of ``attend`` beyond plain causal attention, per backend.
_FEATURES = {"torch": {"sliding_window", "scale", "bidirectional_images"}, "triton": set()}


def model_attention_features(model, bidirectional_images: bool = False) -> set[str]:
    """Attention variations the model uses (a sliding window, a non-default scale, and image
    tokens attending to each other both ways: ``bidirectional_images``, as the model's registry
    entry declares)."""
    found = {"bidirectional_images"} if bidirectional_images else set()
    for layer in model.model.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is not None and attn.sliding_window is not None:
            found.add("sliding_window")
        if attn is not None and attn.scale is not None:
            found.add("scale")
    return found


def choose_attention_backend(settings: WorkerSettings, device: torch.device,
                             needs: set[str] = frozenset()) -> str:
    """The backend for MSTAR_ATTENTION_BACKEND on ``device``: auto = triton on CUDA, else torch.

    ``triton`` without the triton package is a start-up error, and so is ``triton`` on CPU unless
    Triton's interpreter is on (TRITON_INTERPRET=1: correct but far too slow to serve; for tests).
    ``needs`` (``model_attention_features``): auto picks torch when triton lacks one; an explicit
    backend that lacks one is a start-up error.
    """
    choice = settings.attention_backend
    on_cuda = device.type == "cuda"
    if choice != "auto" and needs - _FEATURES[choice]:
        raise ValueError(f"MSTAR_ATTENTION_BACKEND={choice} does not support this model's "
                         f"{', '.join(sorted(needs - _FEATURES[choice]))}; use auto or torch")
    if choice == "auto":
        triton_ok = on_cuda and triton_available() and not needs - _FEATURES["triton"]
        return "triton" if triton_ok else "torch"
    if choice == "triton" and not triton_available():
        raise ValueError("MSTAR_ATTENTION_BACKEND=triton needs the triton package (pip install triton)")
    if choice == "triton" and not on_cuda and not triton_interpreting():
        raise ValueError(f"MSTAR_ATTENTION_BACKEND=triton needs a CUDA device, not {device.type} "
                         "(or TRITON_INTERPRET=1, a slow reference mode); use auto or torch")
    return choice


__all__ = ["AttentionInputs", "choose_attention_backend", "get_backend",
           "model_attention_features"]
