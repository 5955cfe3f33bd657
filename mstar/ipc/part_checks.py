"""A prompt's media parts on the wire (``mstar.ipc.parts.WireImage``, ``WireAudio``), checked
before ``from_wire`` turns them into tensors: a known dtype, a shape whose size is the bytes sent,
placeholder positions inside the prompt, in order, and (audio) a length in seconds."""

from __future__ import annotations

import itertools
import math

from mstar.ipc.check_rules import Invalid, amount, text
from mstar.ipc.parts import WireAudio, WirePart, WireTensor

# The dtypes a part's tensors may have on the wire, with their item sizes in bytes.
ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
              "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
MAX_DIMS = 8


def check_part(part: WirePart, prompt_len: int, field: str) -> None:
    text(part.content_hash, f"{field}.content_hash")
    positions = part.positions
    if positions and not (positions[0] >= 0 and positions[-1] < prompt_len
                          and all(a < b for a, b in itertools.pairwise(positions))):
        raise Invalid(f"{field}.positions must rise strictly within the prompt "
                      f"[0, {prompt_len})")
    if isinstance(part, WireAudio):
        amount(part.seconds, f"{field}.seconds")
    check_tensors(part.tensors, f"{field}.tensors")


def check_tensors(tensors: dict[str, WireTensor], field: str) -> None:
    for name, tensor in tensors.items():
        text(name, field)
        check_tensor(tensor, f"{field}.{name[:64]}")


def check_tensor(tensor: WireTensor, where: str) -> None:
    """A known dtype and a shape whose size is the bytes sent."""
    if tensor.dtype not in ITEM_BYTES:
        raise Invalid(f"{where}.dtype={tensor.dtype[:64]!r} is not one of {sorted(ITEM_BYTES)}")
    if len(tensor.shape) > MAX_DIMS or any(d < 0 for d in tensor.shape):
        raise Invalid(f"{where}.shape={tensor.shape[:MAX_DIMS + 1]} is not a shape")
    if math.prod(tensor.shape) * ITEM_BYTES[tensor.dtype] != len(tensor.data):
        raise Invalid(f"{where}: shape {tensor.shape} of {tensor.dtype} is not the "
                      f"{len(tensor.data)} bytes sent")
