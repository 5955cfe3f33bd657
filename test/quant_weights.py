"""A random quantized weight per kind, shared by the integer-dot and wide-batch kernel tests."""

from __future__ import annotations

import torch

from mstar.models.quant.formats import Int8Weight, QuantWeight, quantize_int8, quantize_q4


def random_weight(kind: str, n: int, k: int) -> QuantWeight:
    torch.manual_seed(n * 1000 + k)
    dense = torch.randn(n, k) * torch.rand(n, 1)  # rows of different magnitude
    if kind == "q4":
        return quantize_q4(dense)
    if kind == "int8":
        return quantize_int8(dense)
    return Int8Weight(torch.randint(-127, 128, (n, k), dtype=torch.int8), torch.rand(n, k // 32))
