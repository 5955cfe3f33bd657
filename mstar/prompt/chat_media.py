"""OpenAI chat messages with media parts, read once for both callers: the media parts in order
(``media_refs``), the messages as a processor's chat template takes them (``template_messages``,
one ``{"type": "image"}`` or ``{"type": "audio"}`` marker per part), and the ``Prompt`` the
processor makes of the rendered text and the decoded pictures or audio clips (``render``,
``build``: ``modality`` says which). ``render_marked`` and ``build`` with its
contents keep special-token text typed in the messages plain text (``special_text``), as the API
server's text chats do.

Messages are plain dicts in OpenAI's shape. ``mstar.LLM.chat`` passes its own (``image_url`` parts
with ``data:`` URLs, or ``image`` parts holding a PIL image: ``offline_picture``); the API server
passes its validated messages dumped to dicts, checks each part (``api_server.media.parts``) and
loads the pictures with its limits (``api_server.media.pool``).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, replace
from typing import Any

from mstar.models.audio.prompt import build_audio_prompt
from mstar.models.media_part import MediaPart
from mstar.models.vision.inputs import build_prompt
from mstar.prompt.special_text import Contents, mark_special_contents, plain_ids, split_marked
from mstar.prompt.value import Prompt

IMAGE_TYPES = ("image_url", "image")  # the content part types that carry a picture
AUDIO_TYPES = ("input_audio",)  # ... and an audio clip
MEDIA_TYPES = IMAGE_TYPES + AUDIO_TYPES

# modality -> (its marker in rendered text, the builder of its prompt); a marker names the
# processor attribute holding it.
_BUILDERS = {"image": ("image_token", build_prompt), "audio": ("audio_token", build_audio_prompt)}


@dataclass(frozen=True)
class MediaRef:
    """One media part of a conversation, where it sits and what it names."""

    param: str  # messages.<i>.content.<j>
    type: str  # "image_url", "image" or "input_audio"
    url: str | None = None  # an image_url part's URL (None: the part has no image_url)
    detail: str | None = None  # an image_url part's detail
    picture: Any = None  # an image part's PIL image (offline only)
    audio: Any = None  # an input_audio part's object ({"data": base64, "format": ...})

    @property
    def modality(self) -> str:
        return "audio" if self.type in AUDIO_TYPES else "image"


def _parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def media_refs(messages: list[dict[str, Any]]) -> list[MediaRef]:
    """Every media part, in prompt order."""
    found = []
    for i, msg in enumerate(messages):
        for j, part in enumerate(_parts(msg)):
            kind = part.get("type")
            if kind not in MEDIA_TYPES:
                continue
            image_url = part.get("image_url") or {}
            found.append(MediaRef(f"messages.{i}.content.{j}", kind, image_url.get("url"),
                                  image_url.get("detail"), part.get("image"),
                                  part.get("input_audio")))
    return found


def has_media(messages: list[dict[str, Any]]) -> bool:
    return any(part.get("type") in MEDIA_TYPES for msg in messages for part in _parts(msg))


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as a processor's chat template takes them: media parts become markers."""
    out = []
    for msg in messages:
        if isinstance(msg.get("content"), list):
            msg = {**msg, "content": [_template_part(part) for part in msg["content"]]}
        out.append(msg)
    return out


def _template_part(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind in IMAGE_TYPES:
        return {"type": "image"}
    if kind in AUDIO_TYPES:
        return {"type": "audio"}
    return {"type": "text", "text": part.get("text") or ""}


def render(processor: Any, messages: list[dict[str, Any]]) -> str:
    """The processor's chat template over the messages, generation prompt added."""
    return render_marked(processor, messages, False)[0]


def render_marked(processor: Any, messages: list[dict[str, Any]],
                  escape: bool) -> tuple[str, Contents]:
    """``render``; with ``escape``, each text holding special-token text is left at a marker
    (``special_text``), and {marker: text} is returned for ``build``."""
    shown, contents = template_messages(messages), {}
    if escape:
        shown, contents = mark_special_contents(processor.tokenizer, shown)
    text = processor.apply_chat_template(shown, tokenize=False, add_generation_prompt=True)
    return text, contents


def build(processor: Any, text: str, pictures: list, contents: Contents | None = None,
          modality: str = "image") -> Prompt:
    """The prompt of rendered ``text`` (one marker per picture or clip, in order) and the
    decoded media (``modality``: PIL pictures for "image", mono float32 clips at the feature
    extractor's rate for "audio"); ``contents`` (from ``render_marked``) are tokenized as plain
    text at their markers, the template's pieces between them by the processor with the media
    their markers call for."""
    marker_name, builder = _BUILDERS[modality]
    if not contents:
        ids, inputs = builder(processor, text, pictures)
        return Prompt(ids, tuple(inputs))
    ids: list[int] = []
    parts: list[MediaPart] = []
    for piece, is_content in split_marked(text, contents):
        if is_content:
            ids += plain_ids(processor.tokenizer, piece)
            continue
        count = piece.count(getattr(processor, marker_name))
        piece_ids, inputs = builder(processor, piece, pictures[len(parts):len(parts) + count])
        parts += [replace(p, positions=tuple(q + len(ids) for q in p.positions)) for p in inputs]
        ids += piece_ids
    if len(parts) != len(pictures):
        raise ValueError(f"the prompt has markers for {len(parts)} {modality} parts; "
                         f"{len(pictures)} given")
    return Prompt(ids, tuple(parts))


def offline_picture(ref: MediaRef) -> Any:
    """An offline part's RGB picture: the PIL image given, or a ``data:`` URL decoded."""
    if ref.picture is not None:
        return ref.picture.convert("RGB")
    from PIL import Image

    if ref.url is None or not ref.url.startswith("data:"):
        raise ValueError("offline image parts take data: URLs only")
    data = base64.b64decode(ref.url.partition(",")[2], validate=True)
    return Image.open(io.BytesIO(data)).convert("RGB")
