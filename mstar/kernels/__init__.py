"""Triton kernels for the CUDA fast path (paged attention, fused norm, rope, SiLU*mul); the
native CPU ops (C++, ``torch.ops.mstar_cpu``) are in ``mstar.kernels.cpu``.

Each module imports triton at its top, so import a kernel module only once the fast path is
chosen; importing this package needs neither triton nor a GPU. Every kernel has a torch
counterpart it replaces (the torch attention backend, ``mstar.models.layers.blocks``), which the tests
use as its reference. On CPU the kernels run only under ``TRITON_INTERPRET=1`` (the tests).
"""

from __future__ import annotations

import importlib.util


def triton_available() -> bool:
    """Whether triton can be imported (CUDA builds of torch on Linux ship it)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``, set before the
    kernel modules are imported)."""
    if not triton_available():
        return False
    import triton

    return bool(triton.knobs.runtime.interpret)
