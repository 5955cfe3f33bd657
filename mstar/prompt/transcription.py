"""Whisper transcription as transformers' ``WhisperForConditionalGeneration.generate`` does it,
in pure Python (no torch): the decoder prompt, the segments parsed from a window's generated ids,
where the next 30 s window starts, and the no-speech check. ``mstar.LLM.transcribe`` and the API
server's audio routes share it; the engine only runs one window per request.

Units: mel frames (100 per second at 16 kHz, hop 160); a timestamp token steps 0.02 s, that is
``INPUT_STRIDE`` = 2 frames (one encoder position); a window holds ``WINDOW_FRAMES`` = 3000 frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mstar.models.audio.whisper_units import (
    INPUT_STRIDE,
    TIME_PRECISION,
    WINDOW_FRAMES,
    no_speech_id,
)

TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class WhisperTokens:
    """The special ids a model's generation_config.json names."""

    start: int  # <|startoftranscript|> (decoder_start_token_id)
    eos: int  # <|endoftext|>
    no_timestamps: int  # <|notimestamps|>; the timestamps <|0.00|>.. follow it
    previous: int | None  # <|startofprev|>: a prompt text goes after it, before ``start``
    languages: dict[str, int] = field(default_factory=dict)  # "en" -> <|en|> (multilingual only)
    tasks: dict[str, int] = field(default_factory=dict)  # "transcribe" -> <|transcribe|>
    multilingual: bool = False

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    @property
    def no_speech(self) -> int:
        """<|nospeech|> (<|nocaptions|> in English-only vocabularies), as transformers finds it."""
        return no_speech_id(self.no_timestamps)

    @classmethod
    def from_generation_config(cls, gen: dict) -> WhisperTokens:
        eos = gen["eos_token_id"]
        suppress = gen.get("suppress_tokens") or []
        previous = gen.get("prev_sot_token_id")
        if previous is None and len(suppress) >= 2:  # transformers' fallback
            previous = suppress[-2]
        return cls(
            start=int(gen["decoder_start_token_id"]),
            eos=int(eos[0] if isinstance(eos, list) else eos),
            no_timestamps=int(gen["no_timestamps_token_id"]),
            previous=None if previous is None else int(previous),
            languages={k.strip("<|>"): int(v) for k, v in (gen.get("lang_to_id") or {}).items()},
            tasks={k: int(v) for k, v in (gen.get("task_to_id") or {}).items()},
            multilingual=bool(gen.get("is_multilingual", False)),
        )


class TranscriptionError(ValueError):
    """A request this model cannot transcribe as asked; ``field`` names the part at fault."""

    def __init__(self, message: str, field_name: str) -> None:
        super().__init__(message)
        self.field = field_name


def decoder_prompt(tokens: WhisperTokens, language: str | None = None, task: str = "transcribe",
                   timestamps: bool = False, prompt_ids: tuple[int, ...] = ()) -> list[int]:
    """``[<|startofprev|> prompt…] <|startoftranscript|> [<|lang|> <|task|>] [<|notimestamps|>]``.

    English-only models take neither a language nor a task token (and refuse a language other
    than English or the translate task). A multilingual model needs ``language``: mstar does not
    run transformers' language detection (``TranscriptionError`` names ``language``).
    """
    if task not in TASKS:
        raise TranscriptionError(f"task must be one of {', '.join(TASKS)}, not {task!r}", "task")
    ids = [tokens.start]
    if tokens.multilingual:
        if language is None:
            raise TranscriptionError("this multilingual model needs a language (mstar does not "
                                     "detect it)", "language")
        code = language.lower()
        if code not in tokens.languages:
            raise TranscriptionError(f"unsupported language {language!r}; this model knows "
                                     f"{', '.join(sorted(tokens.languages))}", "language")
        ids += [tokens.languages[code], tokens.tasks[task]]
    else:
        if language is not None and language.lower() not in ("en", "english"):
            raise TranscriptionError(f"this English-only model cannot take language "
                                     f"{language!r}", "language")
        if task != "transcribe":
            raise TranscriptionError("this English-only model cannot translate", "task")
    if not timestamps:
        ids.append(tokens.no_timestamps)
    if prompt_ids:
        if tokens.previous is None:
            raise TranscriptionError("this model has no <|startofprev|> token", "prompt")
        ids = [tokens.previous, *prompt_ids, *ids]
    return ids


@dataclass(frozen=True)
class Segment:
    """A span of the transcript; ``token_ids`` include its timestamp tokens."""

    start: float  # seconds from the audio's start
    end: float
    token_ids: tuple[int, ...]
    avg_logprob: float | None = None  # of the window that made it
    no_speech_prob: float | None = None


def window_frames(seek: int, total_frames: int) -> int:
    """Frames the window starting at ``seek`` covers (the rest is zero padding)."""
    return min(WINDOW_FRAMES, total_frames - seek)


def split_segments(tokens: WhisperTokens, generated: list[int], seek: int,
                   num_frames: int) -> tuple[list[Segment], int]:
    """A window's segments and how many frames ``seek`` advances (transformers'
    ``_retrieve_segment``). ``generated``: the window's output ids without the prompt and
    without a final <|endoftext|>; ``seek``: the window's first frame; ``num_frames``: the
    frames it covers."""
    generated = [t for t in generated if t != tokens.eos]
    offset = seek * TIME_PRECISION / INPUT_STRIDE
    begin = tokens.timestamp_begin
    is_ts = [t >= begin for t in generated]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(is_ts) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts:
        stamps = [t for t in generated if t >= begin]
        last = num_frames // INPUT_STRIDE  # the window's end
        if stamps and stamps[-1] != begin:  # no pair, but a timestamp: the last one ends it
            last = stamps[-1] - begin
        return [Segment(offset, offset + last * TIME_PRECISION, tuple(generated))], num_frames
    if single_ending:
        cuts.append(len(generated))
    else:
        cuts[-1] += 1  # the last pair's closing timestamp stays with its segment
    segments, prev = [], 0
    for i, cut in enumerate(cuts):
        piece = generated[prev:cut]
        end_at = -1 if i < len(cuts) - 1 or single_ending else -2
        segments.append(Segment(offset + (piece[0] - begin) * TIME_PRECISION,
                                offset + (piece[end_at] - begin) * TIME_PRECISION, tuple(piece)))
        prev = cut
    if single_ending:  # no speech after the last timestamp: the whole window is done
        return segments, num_frames
    # Cut mid-speech: drop what follows the last complete segment, seek to its end.
    return segments, (generated[prev - 2] - begin) * INPUT_STRIDE


def text_ids(tokens: WhisperTokens, segment_ids: tuple[int, ...]) -> list[int]:
    """A segment's ids without timestamps and special tokens (for decoding to text)."""
    return [t for t in segment_ids if t < tokens.eos]


def avg_logprob(logprobs: list[float]) -> float:
    """transformers' ``_retrieve_avg_logprobs`` for greedy: the mean over the generated tokens,
    <|endoftext|> included."""
    return sum(logprobs) / max(1, len(logprobs))


def skips_window(avg: float | None, no_speech_prob: float | None,
                 logprob_threshold: float | None, no_speech_threshold: float | None) -> bool:
    """transformers' no-speech check: a window is silence (its segments dropped, seek moves past
    it) when its avg logprob is under ``logprob_threshold`` and its no-speech probability is over
    ``no_speech_threshold``; both thresholds must be set."""
    if logprob_threshold is None or no_speech_threshold is None:
        return False
    if avg is None or no_speech_prob is None:
        return False
    return avg < logprob_threshold and no_speech_prob > no_speech_threshold


class LongForm:
    """One audio's sequential 30 s windows (transformers' long-form loop): ``window()`` says
    where the next one starts and how many frames it covers; ``done()`` takes its output, keeps
    its segments and moves the seek point (to the end of the last complete segment)."""

    def __init__(self, tokens: WhisperTokens, total_frames: int,
                 logprob_threshold: float | None = None,
                 no_speech_threshold: float | None = None) -> None:
        self.tokens = tokens
        self.total_frames = total_frames
        self.seek = 0
        self.segments: list[Segment] = []
        self.thresholds = (logprob_threshold, no_speech_threshold)

    def window(self) -> tuple[int, int] | None:
        if self.seek >= self.total_frames:
            return None
        return self.seek, window_frames(self.seek, self.total_frames)

    def done(self, generated: list[int], logprobs: list[float] | None = None,
             no_speech_prob: float | None = None) -> None:
        seek, frames = self.window()
        avg = avg_logprob(logprobs) if logprobs else None
        if skips_window(avg, no_speech_prob, *self.thresholds):
            self.seek += frames
            return
        segments, advance = split_segments(self.tokens, generated, seek, frames)
        self.segments += [Segment(s.start, s.end, s.token_ids, avg, no_speech_prob)
                          for s in segments]
        self.seek += advance
