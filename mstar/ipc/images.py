"""An image's encoder inputs on the wire (API server -> worker): tensors as raw bytes with their
dtype and shape, the content hash and the placeholder positions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # torch loads with the first image: the API server starts without it
    from mstar.models.vision.inputs import ImageInput


class WireTensor(msgspec.Struct, array_like=True):
    dtype: str
    shape: list[int]
    data: bytes


class WireImage(msgspec.Struct, array_like=True):
    content_hash: str
    positions: list[int]
    tensors: dict[str, WireTensor]


def to_wire(image: ImageInput) -> WireImage:
    import torch

    tensors = {}
    for name, t in image.tensors.items():
        t = t.contiguous()
        tensors[name] = WireTensor(str(t.dtype).removeprefix("torch."), list(t.shape),
                                   t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return WireImage(image.content_hash, list(image.positions), tensors)


def from_wire(wire: WireImage) -> ImageInput:
    import torch

    from mstar.models.vision.inputs import ImageInput

    tensors = {}
    for name, t in wire.tensors.items():
        dtype = getattr(torch, t.dtype)
        flat = torch.frombuffer(bytearray(t.data), dtype=torch.uint8) if t.data else \
            torch.empty(0, dtype=torch.uint8)
        tensors[name] = flat.view(dtype).reshape(t.shape)
    return ImageInput(wire.content_hash, tensors, tuple(wire.positions))
