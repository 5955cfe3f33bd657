"""An image's encoder inputs on the wire (``mstar.ipc.images.WireImage``), checked before
``from_wire`` turns them into tensors: a known dtype, a shape whose size is the bytes sent, and
placeholder positions inside the prompt, in order."""

from __future__ import annotations

import itertools
import math

from mstar.ipc.check_rules import Invalid, text
from mstar.ipc.images import WireImage

# The dtypes an image's tensors may have on the wire, with their item sizes in bytes.
ITEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
              "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
MAX_DIMS = 8


def check_image(image: WireImage, prompt_len: int, field: str) -> None:
    text(image.content_hash, f"{field}.content_hash")
    positions = image.positions
    if positions and not (positions[0] >= 0 and positions[-1] < prompt_len
                          and all(a < b for a, b in itertools.pairwise(positions))):
        raise Invalid(f"{field}.positions must rise strictly within the prompt "
                      f"[0, {prompt_len})")
    for name, tensor in image.tensors.items():
        where = f"{field}.tensors.{name[:64]}"
        text(name, where)
        if tensor.dtype not in ITEM_BYTES:
            raise Invalid(f"{where}.dtype={tensor.dtype[:64]!r} is not one of {sorted(ITEM_BYTES)}")
        if len(tensor.shape) > MAX_DIMS or any(d < 0 for d in tensor.shape):
            raise Invalid(f"{where}.shape={tensor.shape[:MAX_DIMS + 1]} is not a shape")
        if math.prod(tensor.shape) * ITEM_BYTES[tensor.dtype] != len(tensor.data):
            raise Invalid(f"{where}: shape {tensor.shape} of {tensor.dtype} is not the "
                          f"{len(tensor.data)} bytes sent")
