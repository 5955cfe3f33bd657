"""A chat request with input_audio parts, for an audio-in language model (Qwen2-Audio, Voxtral):
the clips decoded and bounded (``media.audio_loader``, the media pool), the model's chat template
rendered with an audio marker per part, and the model's processor expanding each marker into its
placeholder tokens and running its feature extractor on each clip (pool again:
``mstar.models.audio.prompt.build_audio_prompt`` through ``mstar.prompt.chat_media.build``). The
prompt's parts are the clips' ``AudioInput``. Special-token text typed beside a clip stays plain
text (or is refused), as on the text and image paths."""

from __future__ import annotations

from typing import Any

from mstar.api_server.generation.image_prompt import build_media_prompt
from mstar.api_server.media.audio_loader import AudioLimits, load_clips
from mstar.api_server.media.parts import audio_parts
from mstar.api_server.media.pool import in_media_pool
from mstar.prompt.value import Prompt


async def audio_chat_prompt(processor: Any, settings: Any, max_model_len: int,
                            messages: list[dict[str, Any]]) -> Prompt:
    """``messages``: the request's, as OpenAI-shaped dicts (``media.parts.message_dicts``)."""
    limits = AudioLimits.from_settings(settings)
    parts = audio_parts(messages, True, limits.max_parts)
    rate = int(processor.feature_extractor.sampling_rate)
    clips = await load_clips(parts, limits, rate, settings.request_timeout_s)
    return await in_media_pool(build_media_prompt, processor, messages, clips, max_model_len,
                               settings, "audio")
