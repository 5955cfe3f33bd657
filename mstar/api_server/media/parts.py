"""The image parts of a chat request, checked before any is fetched or decoded: each is a 400 or
413 naming the part (``messages.<i>.content.<j>.image_url``)."""

from __future__ import annotations

from dataclasses import dataclass

from mstar.api_server.http.errors import APIError

# ``detail`` asks OpenAI's models for a resolution; here the model's processor decides it, so
# only the values that ask for nothing else are taken.
ACCEPTED_DETAIL = (None, "auto")


@dataclass(frozen=True)
class ImagePart:
    param: str  # messages.<i>.content.<j>.image_url
    url: str


def image_parts(messages, accepts_images: bool, max_images: int) -> list[ImagePart]:
    found = []
    for i, msg in enumerate(messages):
        for j, part in enumerate(msg.content if isinstance(msg.content, list) else []):
            if part.type != "image_url":
                continue
            param = f"messages.{i}.content.{j}"
            if not accepts_images:
                raise APIError(400, f"`{param}`: 'image_url' content parts are not supported "
                               "(the model takes text only)", param)
            if part.image_url is None:
                raise APIError(400, f"`{param}`: an image_url part needs 'image_url'",
                               f"{param}.image_url")
            if part.image_url.detail not in ACCEPTED_DETAIL:
                raise APIError(400, f"`{param}.image_url.detail`: only 'auto' is supported (the "
                               "model's processor sets the resolution)", f"{param}.image_url.detail")
            if len(found) == max_images:
                raise APIError(400, f"`{param}.image_url`: more than MSTAR_MAX_IMAGES_PER_REQUEST="
                               f"{max_images} images", f"{param}.image_url")
            found.append(ImagePart(f"{param}.image_url", part.image_url.url))
    return found
