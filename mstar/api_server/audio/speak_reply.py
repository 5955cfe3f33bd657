"""POST /v1/audio/speech for a model whose speech is a chat reply (Qwen3-Omni: thinker -> talker
-> code2wav; ``ServedModel.speaks_replies``, from the registry entry naming a talker).

The rule: ``input`` is one user turn, rendered by the model's chat template with the assistant's
turn opened (as a chat request with that one message is: ``GenerationFacade.chat_prompt``); the
reply is greedy, at most what max_model_len leaves, and it is spoken in ``voice``, one of the
model's voices (``talker_config.speaker_id``'s keys, case-insensitive; another is a 400 naming
``voice``). So the audio says the model's *answer* to ``input``, not ``input`` read aloud: the
reference system's talker speaks only what its thinker says. Its text is not returned (a chat
request with ``modalities: ["text", "audio"]`` gives both). ``max_frames`` is CSM's: the talker's
frames are bounded by MSTAR_MAX_SPEECH_SECONDS alone, so it is a 400 naming ``max_frames``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mstar.api_server.audio.speak_protocol import SpeechRequest
from mstar.api_server.generation.run import Job
from mstar.api_server.http.errors import APIError
from mstar.api_server.openai.chat_audio import voice_of
from mstar.api_server.openai.chat_protocol import ChatMessage
from mstar.engine.request.sampling_params import SamplingParams


@dataclass(frozen=True)
class UserTurn:
    """What ``GenerationFacade.chat_prompt`` reads of a chat request: its messages."""

    messages: list[ChatMessage]


def reply_voice(req: SpeechRequest, model: Any) -> str:
    """The model's voice ``voice`` names (a 400 naming ``voice`` for another)."""
    voice = voice_of(req.voice, model)
    if voice is None:
        raise APIError(400, f"`voice`: unknown voice {req.voice!r}; this model's voices: "
                       f"{', '.join(model.voices) or 'none'}", "voice")
    return voice


def check_reply_fields(req: SpeechRequest, model: Any) -> None:
    """The fields a spoken chat reply serves differently from CSM's turn: each a 400 by name."""
    reply_voice(req, model)
    if req.max_frames is not None:
        raise APIError(400, "`max_frames` is not supported for this model: its talker speaks "
                       "the whole reply, at most MSTAR_MAX_SPEECH_SECONDS of it", "max_frames")


async def reply_job(state: Any, req: SpeechRequest) -> Job:
    """The greedy chat request of ``input`` as a user turn, spoken in ``voice``."""
    turn = UserTurn([ChatMessage(role="user", content=req.input)])
    prompt = await state.generation.chat_prompt(turn)
    left = state.model.max_model_len - prompt.num_tokens
    return prompt, SamplingParams(max_tokens=max(left, 1), temperature=0.0,
                                  speaker=reply_voice(req, state.model))
