"""``Prompt``: the token ids of a request's prompt and the media parts whose placeholders they hold.

Every path that makes a prompt (the API server's routes, ``mstar.LLM``) hands this one value on,
and the wire (``mstar.ipc.messages.AddRequest``) carries its parts. A part is typed: an image's
encoder inputs (``ImageInput``) or an audio clip's features (``AudioInput``). A model whose language
model reads embedding rows (Qwen3-Omni's talker) takes them as the prompt's ``feed``
(``RowFeed``: prefill rows, then per-step rows that may keep arriving), its token ids one
placeholder per prefill row (``Prompt.of_feed``); the wire carries no feed yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from mstar.models.audio.inputs import AudioInput
from mstar.models.media_part import MediaPart
from mstar.models.speech.row_feed import RowFeed
from mstar.models.vision.inputs import ImageInput

__all__ = ["MediaPart", "Prompt"]


@dataclass(frozen=True)
class Prompt:
    token_ids: list[int]
    parts: tuple[MediaPart, ...] = ()  # in prompt order; each fills its placeholder positions
    feed: RowFeed | None = None  # embedding rows, for a model that reads them (the talker)

    @classmethod
    def of_feed(cls, feed: RowFeed) -> Prompt:
        """A prompt of embedding rows: one placeholder token id per prefill row."""
        return cls(feed.placeholder_ids(), feed=feed)

    @property
    def images(self) -> tuple[ImageInput, ...]:
        return tuple(p for p in self.parts if isinstance(p, ImageInput))

    @property
    def audios(self) -> tuple[AudioInput, ...]:
        return tuple(p for p in self.parts if isinstance(p, AudioInput))

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)
