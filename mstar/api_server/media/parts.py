"""The image parts of a chat request, checked before any is fetched or decoded: each is a 400 or
413 naming the part (``messages.<i>.content.<j>.image_url``). The parts are found by the one
OpenAI-message media reader (``mstar.prompt.chat_media``) that ``mstar.LLM`` uses too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mstar.api_server.http.errors import APIError
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
