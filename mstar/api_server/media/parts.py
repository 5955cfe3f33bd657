"""The media parts of a chat request, checked before any is fetched or decoded: each is a 400 or
413 naming the part (``messages.<i>.content.<j>.image_url``, ``...input_audio``). Image parts are
found by the one OpenAI-message media reader (``mstar.prompt.chat_media``) that ``mstar.LLM`` uses
too; ``input_audio`` parts (base64 ``data`` and its ``format``) by ``audio_parts``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.audio_loader import AudioPart
from mstar.prompt.chat_media import media_refs

# ``detail`` asks OpenAI's models for a resolution; here the model's processor decides it, so
# only the values that ask for nothing else are taken.
ACCEPTED_DETAIL = (None, "auto")


@dataclass(frozen=True)
class ImagePart:
    param: str  # messages.<i>.content.<j>.image_url
    url: str


def message_dicts(messages: list[Any]) -> list[dict[str, Any]]:
    """Validated chat messages (pydantic) as the OpenAI-shaped dicts a chat template takes."""
    return [m.model_dump(exclude_none=True, include={"role", "content", "name"})
            for m in messages]


def image_parts(messages: list[dict[str, Any]], accepts_images: bool,
                max_images: int) -> list[ImagePart]:
    found = []
    for ref in media_refs(messages):
        if ref.type != "image_url":  # another part type is refused with the text parts' rules
            continue
        param = ref.param
        if not accepts_images:
            raise APIError(400, f"`{param}`: 'image_url' content parts are not supported "
                           "(the model takes text only)", param)
        if ref.url is None:
            raise APIError(400, f"`{param}`: an image_url part needs 'image_url'",
                           f"{param}.image_url")
        if ref.detail not in ACCEPTED_DETAIL:
            raise APIError(400, f"`{param}.image_url.detail`: only 'auto' is supported (the "
                           "model's processor sets the resolution)", f"{param}.image_url.detail")
        if len(found) == max_images:
            raise APIError(400, f"`{param}.image_url`: more than MSTAR_MAX_IMAGES_PER_REQUEST="
                           f"{max_images} images", f"{param}.image_url")
        found.append(ImagePart(f"{param}.image_url", ref.url))
    return found


AUDIO_TYPE = "input_audio"


def has_audio(messages: list[dict[str, Any]]) -> bool:
    return any(part.get("type") == AUDIO_TYPE for msg in messages
               for part in (msg.get("content") if isinstance(msg.get("content"), list) else []))


def audio_parts(messages: list[dict[str, Any]], accepts_audio: bool,
                max_parts: int) -> list[AudioPart]:
    """The request's input_audio parts in prompt order, each with its data and stated format."""
    found = []
    for i, msg in enumerate(messages):
        content = msg.get("content") if isinstance(msg.get("content"), list) else []
        for j, part in enumerate(content):
            if part.get("type") != AUDIO_TYPE:
                continue
            param = f"messages.{i}.content.{j}"
            if not accepts_audio:
                raise APIError(400, f"`{param}`: 'input_audio' content parts are not supported "
                               "(the model takes no audio)", param)
            audio = part.get("input_audio")
            if not audio:
                raise APIError(400, f"`{param}`: an input_audio part needs 'input_audio'",
                               f"{param}.input_audio")
            if len(found) == max_parts:
                raise APIError(400, f"`{param}.input_audio`: more than "
                               f"MSTAR_MAX_AUDIO_PARTS_PER_REQUEST={max_parts} audio parts",
                               f"{param}.input_audio")
            found.append(AudioPart(f"{param}.input_audio", audio["data"], audio["format"]))
    return found
