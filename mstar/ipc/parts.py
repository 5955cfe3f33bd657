"""A prompt's media parts on the wire (API server -> worker): tensors as raw bytes with their
dtype and shape, the content hash and the placeholder positions. Each part type is its own
tagged struct (``WireImage``, ``WireAudio``), so the receiver rebuilds the same typed part."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:  # torch loads with the first part: the API server starts without it
    import torch

    from mstar.models.media_part import MediaPart


class WireTensor(msgspec.Struct, array_like=True):
    dtype: str
    shape: list[int]
    data: bytes


class WireImage(msgspec.Struct, array_like=True, tag="image"):
    content_hash: str
    positions: list[int]
    tensors: dict[str, WireTensor]


class WireAudio(msgspec.Struct, array_like=True, tag="audio"):
    content_hash: str
    positions: list[int]  # empty for cross-attention models (Whisper)
    tensors: dict[str, WireTensor]
    seconds: float = 0.0


WirePart = WireImage | WireAudio


def tensors_to_wire(tensors: dict[str, torch.Tensor]) -> dict[str, WireTensor]:
    import torch

    out = {}
    for name, t in tensors.items():
        t = t.contiguous()
        out[name] = WireTensor(str(t.dtype).removeprefix("torch."), list(t.shape),
                               t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return out


def tensors_from_wire(tensors: dict[str, WireTensor]) -> dict[str, torch.Tensor]:
    import torch

    out = {}
    for name, t in tensors.items():
        dtype = getattr(torch, t.dtype)
        flat = torch.frombuffer(bytearray(t.data), dtype=torch.uint8) if t.data else \
            torch.empty(0, dtype=torch.uint8)
        out[name] = flat.view(dtype).reshape(t.shape)
    return out


def to_wire(part: MediaPart) -> WirePart:
    from mstar.models.audio.inputs import AudioInput

    tensors = tensors_to_wire(part.tensors)
    if isinstance(part, AudioInput):
        return WireAudio(part.content_hash, list(part.positions), tensors, part.seconds)
    return WireImage(part.content_hash, list(part.positions), tensors)


def from_wire(wire: WirePart) -> MediaPart:
    from mstar.models.audio.inputs import AudioInput
    from mstar.models.vision.inputs import ImageInput

    tensors = tensors_from_wire(wire.tensors)
    if isinstance(wire, WireAudio):
        return AudioInput(wire.content_hash, tensors, tuple(wire.positions), wire.seconds)
    return ImageInput(wire.content_hash, tensors, tuple(wire.positions))
