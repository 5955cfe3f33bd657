"""A chat request with image parts, for a vision-language model: the images loaded (bounded pool),
the model's chat template rendered with an image marker per part, and the model's processor
expanding each marker into its placeholder tokens (pool again). The result is a ``Prompt`` whose
parts are the images' encoder inputs. The messages are read by ``mstar.prompt.chat_media``, as
``mstar.LLM.chat`` reads its own. Special-token text typed beside an image stays plain text (or is
refused), as on the text path: MSTAR_SPECIAL_TOKENS_IN_CONTENT, ``mstar.prompt.special_text``."""

from __future__ import annotations

from typing import Any

from mstar.api_server.generation.special_text import lost_marker, refuse_special_text
from mstar.api_server.http.bounds import check_prompt_chars
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.loader import ImageLoader
from mstar.api_server.media.parts import image_parts
from mstar.api_server.media.pool import in_media_pool
from mstar.prompt import chat_media
from mstar.prompt.special_text import MarkerLost, message_text, unmarked_chars
from mstar.prompt.value import Prompt


def build_media_prompt(processor: Any, messages: list[dict[str, Any]], media: list,
                       max_model_len: int, settings: Any, modality: str = "image") -> Prompt:
    """The prompt of a chat whose ``media`` (decoded pictures, or clips: ``modality``) the
    processor expands at the template's markers; every refusal a 400."""
    # mstar.prompt.chat_media.build takes ``modality`` once audio joins it (the graph branch)
    by_modality = {} if modality == "image" else {"modality": modality}
    escape = settings.special_tokens_in_content == "escape"
    if not escape:
        refuse_special_text(processor.tokenizer, [message_text(m) for m in messages])
    try:
        text, contents = chat_media.render_marked(processor, messages, escape)
        check_prompt_chars(unmarked_chars(text, contents), settings.max_prompt_chars, "messages")
        prompt = chat_media.build(processor, text, media, contents, **by_modality)
    except APIError:
        raise
    except MarkerLost as exc:
        raise lost_marker(exc) from None
    except Exception as exc:  # a template or processor refusing this conversation
        raise APIError(400, f"cannot prepare the {modality} parts and text: {exc}",
                       "messages") from exc
    if prompt.num_tokens >= max_model_len:
        raise APIError(400, f"the prompt takes {prompt.num_tokens} tokens with its {modality} "
                       f"parts; max_model_len is {max_model_len}", "messages")
    return prompt


async def image_chat_prompt(processor: Any, loader: ImageLoader, settings: Any,
                            max_model_len: int, messages: list[dict[str, Any]]) -> Prompt:
    """``messages``: the request's, as OpenAI-shaped dicts (``media.parts.message_dicts``);
    their images are held in ``loader``'s pixel budget until the processor is done with them."""
    parts = image_parts(messages, True, settings.max_images_per_request)
    async with loader.images(parts, settings.request_timeout_s) as images:
        return await in_media_pool(build_media_prompt, processor, messages, images,
                                   max_model_len, settings)
