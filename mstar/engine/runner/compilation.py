"""torch.compile for the model's pointwise-heavy parts (MSTAR_COMPILE).

Only the MLPs are compiled: they are where elementwise fusion pays, and attention stays eager so
its paged-cache bookkeeping never causes graph breaks or recompiles.
"""

from __future__ import annotations

import structlog
import torch

log = structlog.get_logger(__name__)


def compile_model(model: torch.nn.Module, recompile_limit: int) -> None:
    """Compile in place; MSTAR_RECOMPILE_LIMIT bounds how often dynamo may recompile a function."""
    import torch._dynamo

    torch._dynamo.config.recompile_limit = recompile_limit
    for layer in model.model.layers:
        layer.mlp.compile(dynamic=True)
    log.info("model_compiled", parts="mlp", layers=len(model.model.layers),
             recompile_limit=recompile_limit)
