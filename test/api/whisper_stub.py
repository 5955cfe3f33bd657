"""The audio routes in process on a stub Whisper: a speech model whose "features" only record the
clip they were given, and an engine that answers each window with the token ids a script returns
(known ids, so formats, timing and events can be checked exactly). The tokenizer is the tests'
tiny one (ids < 400 are text); Whisper's special ids sit above it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from api_stub import StubEngine, app_on

from mstar.api_server.audio.speech import SpeechModel
from mstar.engine.request.outputs import TokenLogprob
from mstar.models.audio.inputs import AudioInput
from mstar.output.processor import TextOutput
from mstar.prompt.transcription import WINDOW_FRAMES, WhisperTokens

EOS, START, PREVIOUS, EN, FR, TRANSLATE, TRANSCRIBE = 400, 401, 402, 403, 404, 405, 406
NO_TIMESTAMPS = 408
TS = NO_TIMESTAMPS + 1  # <|0.00|>; TS + k is k x 0.02 s
RATE = 16_000
HOP = RATE // 100  # samples per mel frame
LOGPROB = -0.25


def ts(seconds: float) -> int:
    return TS + round(seconds / 0.02)


def whisper_tokens(multilingual: bool) -> WhisperTokens:
    return WhisperTokens(start=START, eos=EOS, no_timestamps=NO_TIMESTAMPS, previous=PREVIOUS,
                         languages={"en": EN, "fr": FR} if multilingual else {},
                         tasks={"translate": TRANSLATE, "transcribe": TRANSCRIBE},
                         multilingual=multilingual)


class Clips:
    """The speech model's feature steps: the "features" are the clip itself (frames as
    transformers counts them: 3000 for a clip of at most 30 s); each window records the samples
    it covers."""

    def __init__(self) -> None:
        self.seen: list[np.ndarray] = []

    def features(self, clip: np.ndarray) -> tuple[np.ndarray, int]:
        return clip, max(WINDOW_FRAMES, len(clip) // HOP)

    def window(self, clip: np.ndarray, seek: int, frames: int) -> AudioInput:
        self.seen.append(clip[seek * HOP:(seek + frames) * HOP])
        return AudioInput(f"clip-{len(self.seen)}", {}, (), frames / 100)


Script = Callable[[list[int], int], list[int]]  # (prompt ids, window number) -> generated ids


class WhisperEngine(StubEngine):
    """Each sub-request gets ``script``'s ids and <|endoftext|>, one output per id, the last one
    finishing it.
    Prompts carry audio parts, which the wire of this branch may not carry yet: not encoded."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script

    def submit(self, requests: list, sink) -> None:
        for rid, prompt, params in requests:
            self.submitted.append((rid, prompt, params))
            ids = [*self.script(prompt.token_ids, len(self.submitted) - 1), EOS][:params.max_tokens]
            for k, token in enumerate(ids):
                last = k == len(ids) - 1
                logprobs = None if params.logprobs is None else [TokenLogprob(token, LOGPROB)]
                sink.put_nowait(TextOutput(rid, [token], finished=last,
                                            finish_reason="stop" if last else None,
                                            num_prompt_tokens=len(prompt.token_ids),
                                            num_output_tokens=k + 1, logprobs=logprobs))


def speech_script(words) -> Script:
    """A timed window: two segments (0-1.2 s, 1.2-2 s) ending on a single timestamp; untimed:
    both phrases."""
    a, b, _, _ = words

    def script(prompt: list[int], k: int) -> list[int]:
        if NO_TIMESTAMPS in prompt:
            return [*a, *b]
        return [ts(0.0), *a, ts(1.2), ts(1.2), *b, ts(2.0)]
    return script


def whisper_app(tokenizer, script: Script, multilingual: bool = False, **settings):
    """(app, engine, clips) of an API server serving the stub Whisper."""
    engine, clips = WhisperEngine(script), Clips()
    speech = SpeechModel(clips.features, clips.window, RATE, whisper_tokens(multilingual))
    app = app_on(engine, tokenizer, max_model_len=448, speech=speech, **settings)
    return app, engine, clips
