"""A chat request with image parts, for a vision-language model: the images loaded (bounded pool),
the model's chat template rendered with an image marker per part, and the model's processor
expanding each marker into its placeholder tokens (pool again). The result is a ``Prompt`` whose
parts are the images' encoder inputs. The messages are read by ``mstar.prompt.chat_media``, as
``mstar.LLM.chat`` reads its own."""

from __future__ import annotations

from typing import Any

from mstar.api_server.http.bounds import check_prompt_chars
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.loader import ImageLoader
from mstar.api_server.media.parts import image_parts
from mstar.api_server.media.pool import in_media_pool
from mstar.prompt import chat_media
from mstar.prompt.value import Prompt


def _build(processor: Any, messages: list[dict[str, Any]], images: list, max_model_len: int,
           max_chars: int) -> Prompt:
    try:
        text = chat_media.render(processor, messages)
        check_prompt_chars(text, max_chars, "messages")
        prompt = chat_media.build(processor, text, images)
    except APIError:
        raise
    except Exception as exc:  # a template or processor refusing this conversation
        raise APIError(400, f"cannot prepare the images and text: {exc}", "messages") from exc
    if prompt.num_tokens >= max_model_len:
        raise APIError(400, f"the prompt takes {prompt.num_tokens} tokens with its images; "
                       f"max_model_len is {max_model_len}", "messages")
    return prompt


async def image_chat_prompt(processor: Any, loader: ImageLoader, settings: Any,
                            max_model_len: int, messages: list[dict[str, Any]]) -> Prompt:
    """``messages``: the request's, as OpenAI-shaped dicts (``media.parts.message_dicts``);
    their images are held in ``loader``'s pixel budget until the processor is done with them."""
    parts = image_parts(messages, True, settings.max_images_per_request)
    async with loader.images(parts, settings.request_timeout_s) as images:
        return await in_media_pool(_build, processor, messages, images, max_model_len,
                                   settings.max_prompt_chars)
