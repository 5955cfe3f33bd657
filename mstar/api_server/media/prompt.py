"""A chat request with image parts, for a vision-language model: the images loaded (bounded pool),
the model's chat template rendered with an image marker per part, and the model's processor
expanding each marker into its placeholder tokens (pool again). The result is an ``ImagePrompt``:
the token ids (a list, as every other prompt) carrying the images' encoder inputs along."""

from __future__ import annotations

from typing import Any

from mstar.api_server.generation.prompts import check_prompt_chars
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.parts import image_parts
from mstar.api_server.media.pool import in_media_pool
from mstar.ipc.images import WireImage, to_wire
from mstar.models.vision.inputs import ImageInput, build_prompt


class ImagePrompt(list):
    """Prompt token ids whose image placeholders ``images`` fill."""

    images: tuple[ImageInput, ...] = ()


def wire_images(prompt_ids: list[int]) -> list[WireImage]:
    return [to_wire(image) for image in getattr(prompt_ids, "images", ())]


def has_images(req) -> bool:
    return any(isinstance(m.content, list) and any(p.type == "image_url" for p in m.content)
               for m in req.messages)


def _template_messages(req) -> list[dict[str, Any]]:
    """The request's messages as the processor's chat template takes them."""
    out = []
    for msg in req.messages:
        item = msg.model_dump(exclude_none=True, include={"role", "content", "name"})
        if isinstance(msg.content, list):
            item["content"] = [{"type": "image"} if p.type == "image_url"
                               else {"type": "text", "text": p.text or ""} for p in msg.content]
        out.append(item)
    return out


def _build(processor, req, images, max_model_len: int, max_chars: int) -> ImagePrompt:
    try:
        text = processor.apply_chat_template(_template_messages(req), tokenize=False,
                                             add_generation_prompt=True)
        check_prompt_chars(text, max_chars, "messages")
        ids, inputs = build_prompt(processor, text, images)
    except APIError:
        raise
    except Exception as exc:  # a template or processor refusing this conversation
        raise APIError(400, f"cannot prepare the images and text: {exc}", "messages") from exc
    if len(ids) >= max_model_len:
        raise APIError(400, f"the prompt takes {len(ids)} tokens with its images; "
                       f"max_model_len is {max_model_len}", "messages")
    prompt = ImagePrompt(ids)
    prompt.images = tuple(inputs)
    return prompt


async def image_chat_prompt(state, req) -> ImagePrompt:
    parts = image_parts(req.messages, True, state.settings.max_images_per_request)
    async with state.media.images(parts, state.settings.request_timeout_s) as images:
        return await in_media_pool(_build, state.processor, req, images, state.max_model_len,
                                   state.settings.max_prompt_chars)
