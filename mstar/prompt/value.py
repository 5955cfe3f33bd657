"""``Prompt``: the token ids of a request's prompt and the media parts whose placeholders they hold.

Every path that makes a prompt (the API server's routes, ``mstar.LLM``) hands this one value on,
and the wire (``mstar.ipc.messages.AddRequest``) carries its parts. A part is typed: an image's
encoder inputs now (``ImageInput``); an audio part joins ``MediaPart`` when a model takes one.
"""

from __future__ import annotations

from dataclasses import dataclass

from mstar.models.vision.inputs import ImageInput

MediaPart = ImageInput  # the union of every part type, as modalities are added


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int]
    parts: tuple[MediaPart, ...] = ()  # in prompt order; each fills its placeholder positions

    @property
    def images(self) -> tuple[ImageInput, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImageInput))

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)
