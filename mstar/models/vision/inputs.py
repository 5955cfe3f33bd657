"""Turns a prompt with image markers plus decoded images into what the engine runs: the token ids
(each marker expanded to the model's placeholder tokens) and one ``ImageInput`` per image.

transformers' processor of the model directory does the work (its PIL image processor: torchvision
is not a dependency). Each image's tensors come from the image processor alone, so an image is
encoded the same way whatever else shares its prompt, and its content hash names its encoder output.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads with the first image: the API server starts without it
    import torch


@dataclass(frozen=True)
class ImageInput:
    content_hash: str  # of the preprocessed tensors: same pixels, same encoder output
    tensors: dict[str, torch.Tensor]  # the encoder's input for this image alone
    positions: tuple[int, ...]  # prompt positions taking its encoder rows, in order (other
    # tokens, e.g. tile tags, may sit between them)

    @property
    def offset(self) -> int:
        """First position of its placeholder run."""
        return self.positions[0]

    @property
    def end(self) -> int:
        """One past the last position of its placeholder run."""
        return self.positions[-1] + 1

    @property
    def num_embeds(self) -> int:
        return len(self.positions)


# Families whose transformers processor would load a video processor (its class needs
# torchvision): their images-only subclass instead, by config.model_type.
_IMAGES_ONLY_PROCESSORS = {
    "qwen2_5_vl": ("mstar.models.vision.qwen2_5_vl", "Qwen2_5_VLImagesProcessor"),
}
# Processor outputs that are not the encoder's input (they describe the text around the image).
_TEXT_SIDE = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")


def load_processor(model_dir):
    import importlib

    from transformers import AutoConfig, AutoProcessor

    model_type = AutoConfig.from_pretrained(model_dir).model_type
    if model_type in _IMAGES_ONLY_PROCESSORS:
        module, name = _IMAGES_ONLY_PROCESSORS[model_type]
        return getattr(importlib.import_module(module), name).from_pretrained(model_dir,
                                                                              backend="pil")
    return AutoProcessor.from_pretrained(model_dir, backend="pil")


def image_token_id(processor) -> int:
    """The placeholder token: the tokenizer's own image token where it names one (Gemma 3's
    prompt marker, ``processor.image_token``, is the begin-of-image token around them)."""
    tok = processor.tokenizer
    return tok.convert_tokens_to_ids(getattr(tok, "image_token", None) or processor.image_token)


def content_hash(tensors: dict[str, torch.Tensor]) -> str:
    import torch

    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def _image_alone(processor, image) -> tuple[dict[str, torch.Tensor], int]:
    """One image through the processor on its own: its tensors (as the processor batches them)
    and its placeholder count (the image tokens of a prompt holding only its marker)."""
    import torch

    out = processor(text=[processor.image_token], images=[[image]], return_tensors="pt",
                    add_special_tokens=False)
    token = image_token_id(processor)
    count = int((out["input_ids"] == token).sum())
    tensors = {k: v for k, v in out.items()
               if isinstance(v, torch.Tensor) and k not in _TEXT_SIDE}
    return tensors, count


def build_prompt(processor, text: str, images: list) -> tuple[list[int], list[ImageInput]]:
    """``text`` holds one ``processor.image_token`` marker per image, in order."""
    batch = processor(text=[text], images=[images] if images else None, return_tensors="pt",
                      add_special_tokens=False)
    ids = batch["input_ids"][0].tolist()
    token = image_token_id(processor)
    where = [i for i, t in enumerate(ids) if t == token]
    inputs, used = [], 0
    for image in images:
        tensors, n = _image_alone(processor, image)
        mine = where[used:used + n]
        if len(mine) != n:
            raise ValueError(f"the prompt has {len(where)} image tokens; the images need more")
        used += n
        inputs.append(ImageInput(content_hash(tensors), tensors, tuple(mine)))
    if used != len(where):
        raise ValueError(f"the prompt has {len(where)} image tokens; its images fill {used}")
    return ids, inputs

