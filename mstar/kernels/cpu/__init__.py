"""The native CPU ops (``torch.ops.mstar_cpu``), built from ``csrc/`` on first use (``build.py``):
quantized and bf16-weight linears, fused per-token ops, paged decode attention and decoder layers.
Their kernel levels are sets of instruction-set features (``levels.py``). The models call them
from ``mstar.models``; importing this package imports neither torch nor a compiler."""
