"""The body of POST /v1/audio/speech (OpenAI's shape) and its own rules. Every OpenAI field is
served or refused by name: ``response_format`` wav, pcm, flac, mp3 or opus
(``sound_formats``; aac has no encoder here), ``speed`` 1.0 only (a knob that does nothing says
so), ``instructions`` refused (CSM takes no style prompt), ``stream_format`` "audio" (the
formats whose encoders only append: wav, pcm, opus) or "sse" (pcm only: OpenAI's events carry
raw samples).
``voice`` is a CSM speaker id, "0" .. "9" (``utterance.CSM_SPEAKERS``), or Qwen3-Omni's voice
(``speak_reply``); ``max_frames`` (an
extra) bounds the audio: Mimi makes 12.5 frames a second. The bounds (input characters, seconds
of audio) are ``speak_bounds``'s."""

from __future__ import annotations

from pydantic import Field

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.sound_formats import FORMATS, NO_ENCODER
from mstar.api_server.openai.protocol import StrictModel
from mstar.models.speech.utterance import CSM_SPEAKERS


class SpeechRequest(StrictModel):
    model: str | None = None
    input: str = Field(min_length=1, description="The text to say (at most "
                       "MSTAR_MAX_SPEECH_INPUT_CHARS characters, and its tokens must fit "
                       "max_model_len).")
    voice: str = Field("0", description="A voice of the model: CSM's speaker ids \"0\" .. "
                       "\"9\"; Qwen3-Omni's talker speakers (talker_config.speaker_id's keys, "
                       "e.g. \"ethan\").")
    instructions: str | None = Field(None, description="Not supported: a 400 unless empty "
                                     "(the field table's rejection).")
    response_format: str = Field("wav", description="wav (16-bit mono; the default), pcm "
                                 "(16-bit little-endian, raw), flac, mp3 or opus (Ogg Opus); "
                                 "aac is a 400 (no encoder here).")
    speed: float = Field(1.0, description="1.0 only: other speeds are a 400.")
    stream_format: str | None = Field(None, description="\"audio\": the bytes as each "
                                      "chunk decodes (wav, pcm or opus; wav: a header with "
                                      "sizes 0xFFFFFFFF first); \"sse\": speech.audio.delta "
                                      "events (base64 pcm), then speech.audio.done "
                                      "(response_format pcm).")
    max_frames: int | None = Field(None, ge=1, description="Most codec frames (12.5 a "
                                   "second), within MSTAR_MAX_SPEECH_SECONDS; unset: that "
                                   "bound, cut to what max_model_len leaves.")

    def speaker(self) -> int:
        """The speaker id ``voice`` names (a 400 naming ``voice`` for any other)."""
        if not (self.voice.isdigit() and int(self.voice) < CSM_SPEAKERS):
            raise APIError(400, f"`voice`: unknown voice {self.voice!r}; this model's voices are "
                           f"speaker ids \"0\" .. \"{CSM_SPEAKERS - 1}\"", "voice")
        return int(self.voice)


def check_speech_fields(req: SpeechRequest) -> None:
    """The fields served partly: each refusal a 400 naming its field (``voice``: the route's,
    per model: ``speaker`` for CSM, ``speak_reply.reply_voice`` for a spoken chat reply)."""
    if req.response_format not in FORMATS:
        why = NO_ENCODER.get(req.response_format, "not a format of this route")
        raise APIError(400, f"`response_format`: {req.response_format!r} is not supported "
                       f"({why}); use one of {', '.join(FORMATS)}", "response_format")
    if req.speed != 1.0:
        raise APIError(400, f"`speed`: only 1.0 is supported (the audio is not time-stretched), "
                       f"not {req.speed}", "speed")
    check_stream_format(req.stream_format, req.response_format)


def check_stream_format(stream_format: str | None, response_format: str) -> None:
    """The one rule for streaming: "audio" takes the formats whose encoders only append
    (``SoundFormat.streams``), "sse" pcm (OpenAI's events carry raw samples); any other pair is a
    400 naming both fields (its param ``stream_format``)."""
    if stream_format is None:
        return
    streamed = tuple(name for name, fmt in FORMATS.items() if fmt.streams)
    whole = ", ".join(name for name, fmt in FORMATS.items() if not fmt.streams)
    served = {"audio": streamed, "sse": ("pcm",)}
    if response_format not in served.get(stream_format, ()):
        raise APIError(400, f"`stream_format` {stream_format!r} with `response_format` "
                       f"{response_format!r} is not supported: \"audio\" streams "
                       f"{', '.join(streamed)} ({whole}: whole files only, as their encoders go "
                       f"back to fill in a header at the end), \"sse\" pcm",
                       "stream_format")
