"""What one choice (one sub-request) accumulated from its text outputs: the non-streaming answers
and the usage of a stream, for every API."""

from __future__ import annotations

from dataclasses import dataclass, field

from mstar.engine.request.outputs import TokenLogprob
from mstar.output.processor import TextOutput


def finish_reason(out: TextOutput) -> str | None:
    """The engine's 'abort' never reaches a client as such; it only ends an aborted stream."""
    return "stop" if out.finish_reason == "abort" else out.finish_reason


@dataclass
class Choice:
    """What one choice accumulated (non-streaming responses, usage in streams)."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: str | None = None
    cached_tokens: int = 0
    no_speech_prob: float | None = None  # Whisper's (mstar.engine.runner.no_speech)
    audio: bytearray = field(default_factory=bytearray)  # speech out: float32 samples (LE)
    audio_rate: int = 0  # their rate; 0: no audio came

    def add(self, out: TextOutput) -> None:
        self.cached_tokens = out.num_cached_tokens
        if out.no_speech_prob is not None:
            self.no_speech_prob = out.no_speech_prob
        self.text += out.new_text
        if out.new_audio is not None:
            self.audio += out.new_audio.samples
            self.audio_rate = out.new_audio.rate
        self.token_ids.extend(out.new_token_ids)
        self.logprobs.extend(out.logprobs or [])
        if out.finished:
            self.finish_reason = finish_reason(out)
