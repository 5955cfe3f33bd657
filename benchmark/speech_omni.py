"""Speech out served, Qwen3-Omni: streamed chats with audio out (``modalities: ["text",
"audio"]``, pcm16 ``delta.audio`` chunks beside the ``delta.audio.transcript`` text) at 1 and 8
concurrent requests, against ``mstar serve`` on a tiny random Qwen3-Omni saved by this script
(test/omni_helpers.py's ``save_tiny_omni``: the tests' model; no hub), float32, CPU.

    PYTHONPATH=. .venv/bin/python -m benchmark.audio --speech-out --model omni [--tokens 128]

Each request is the same user turn in the talker's one voice, answered with exactly
``--tokens`` text tokens (``ignore_eos``, greedy), through ``benchmark.runner_client`` (its
``Target.audio`` asks for audio out; its timer keeps the first audio bytes). Per request: the
time to the first audio chunk and to the last text token (send to last transcript delta); per
round: how many requests had their first audio before their last text, seconds of audio per
wall second, and text tokens per second of the text stream (to the round's last text token:
the talker's audio may go on after it). Each concurrency runs a round with audio on and one
with audio off (``modalities`` text only: the same chats without the talker and code2wav), so
text tok/s with audio on and off come from the same run.

Seconds of audio: the pcm16 samples over the rate at which a frame is 80 ms
(``samples_per_frame`` x 12.5 frames a second). The released code2wav makes 1920 samples a frame
at 24 kHz, so there it is the samples over 24 000; the tiny one makes 8 a frame (served at 24
kHz, a frame is a third of a millisecond), so its samples over 24 000 would be 240 times too
short to compare with a real model's. Each code2wav window's cut (a few samples, as
transformers' ``chunked_decode``) makes it a little short of frames / 12.5.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from benchmark.runner_client import RequestResult, Target, run_client, send_request, session
from benchmark.runner_workload import RequestSpec

CONCURRENCY = (1, 8)
PROMPT = "The quick brown fox jumps over the lazy dog, and then it rests in the sun."
NAME = "omni"  # the served model's name (MSTAR_SERVED_MODEL_NAMES)
VOICE = "ethan"  # the tiny model's one speaker (test/omni_helpers.py's talker_config.speaker_id)
AUDIO = {"voice": VOICE, "format": "pcm16"}  # OpenAI streams pcm16 only
BYTES_PER_SAMPLE = 2  # pcm16 mono
HELPERS = Path(__file__).resolve().parent.parent / "test" / "omni_helpers.py"
# The saved model's seed: with it the greedy reply to PROMPT runs 128 tokens without the
# thinker's end token, 119 of them words (others are special ids: no text), and the talker
# speaks to its bound without its own end (offline, OmniSpeaker: 160 of 160 frames), so the
# audio lasts as long as the text. At seed 0 the served talker ends after 17 frames of a
# 128-token reply (code2wav's first 25-frame window never fills); at seed 5 every reply token
# is a special id, so the stream carries no text at all.
SEED = 11


@dataclass
class Round:
    """One round of ``concurrency`` chats sent at once, audio on or off."""

    results: list[RequestResult]
    wall_s: float

    @property
    def tok_s(self) -> float:
        """Text tokens (the server's usage count) per second of the text stream: from sending
        the round to its last text token (the talker's audio may go on after it)."""
        return sum(r.output_tokens for r in self.results) / max(r.last_token for r in self.results)


@dataclass
class OmniRow:
    concurrency: int
    spoken: Round  # audio on
    text_only: Round  # audio off
    frame_rate: float  # samples a second at which a frame is 80 ms (module docstring)

    @property
    def first_audio_s(self) -> list[float]:
        return [r.first_audio for r in self.spoken.results]

    @property
    def last_text_s(self) -> list[float]:
        return [r.last_token for r in self.spoken.results]

    @property
    def audio_first(self) -> int:
        """Requests whose first audio came before their last text token."""
        return sum(a < t for a, t in zip(self.first_audio_s, self.last_text_s, strict=True))

    @property
    def audio_s(self) -> float:
        samples = sum(r.audio_bytes for r in self.spoken.results) / BYTES_PER_SAMPLE
        return samples / self.frame_rate

    @property
    def rtf(self) -> float:
        """Seconds of audio per second of wall time (above 1: faster than real time)."""
        return self.audio_s / self.spoken.wall_s


def save_omni(path: Path) -> Path:
    """The tests' tiny random Qwen3-Omni (test/omni_helpers.py's ``save_tiny_omni``, loaded
    from the checkout as the transcription table reads test/fixtures) with a word-level
    tokenizer of the prompt's words (``speech_out.word_tokenizer``), saved at ``path``."""
    from benchmark.speech_out import word_tokenizer

    spec = importlib.util.spec_from_file_location("omni_helpers", HELPERS)
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    return helpers.save_tiny_omni(path, word_tokenizer(PROMPT), seed=SEED)


def frame_rate(model: Path) -> float:
    """The samples a second at which one code2wav frame is 1 / 12.5 s (module docstring)."""
    from mstar.models.speech.utterance import FRAMES_PER_SECOND

    codec = json.loads((model / "config.json").read_text())["code2wav_config"]
    return math.prod(codec["upsample_rates"] + codec["upsampling_ratios"]) * FRAMES_PER_SECOND


def speech_seconds(tokens: int) -> float:
    """The served speech bound: a talker frame per text token. The talker reads one text row a
    frame and the random one never ends by itself (``SEED``), so its audio ends with the text
    (the last text leaves when the thinker ends; only the finish waits for the talker's,
    ``SpeechChain``), and a round's wall time is the text's, not a talker's tail's."""
    from mstar.models.speech.utterance import FRAMES_PER_SECOND

    return tokens / FRAMES_PER_SECOND


async def round_of(url: str, concurrency: int, tokens: int, spoken: bool) -> Round:
    """``concurrency`` streamed chats at once; a failed one raises."""
    target = Target(url, "chat", NAME, ignore_eos=True, temperature=0.0,
                    audio=AUDIO if spoken else None)
    specs = [RequestSpec(i, PROMPT, tokens) for i in range(concurrency)]
    async with session(600) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(send_request(client, target, s) for s in specs))
        wall = time.perf_counter() - start
    failed = [r.error for r in results if r.error is not None]
    if failed or (spoken and any(r.first_audio is None for r in results)):
        raise RuntimeError(f"a chat failed or made no audio: {failed}")
    return Round(list(results), wall)


def measure(url: str, rate: float, tokens: int, passes: int,
            concurrency: tuple[int, ...] = CONCURRENCY) -> list[OmniRow]:
    """Per concurrency, the best of ``passes`` rounds (by wall time) with audio on and with it
    off, after a warm-up of each."""
    def best(c: int, spoken: bool) -> Round:
        return min((run_client(round_of(url, c, tokens, spoken)) for _ in range(passes)),
                   key=lambda r: r.wall_s)

    for spoken in (True, False):
        run_client(round_of(url, 1, tokens, spoken))
    return [OmniRow(c, best(c, True), best(c, False), rate) for c in concurrency]


def report(rows: list[OmniRow], tokens: int) -> None:
    print(f"speech out: tiny random Qwen3-Omni, streamed chats of {tokens} text tokens")
    print("| concurrent chats | first audio, median (ms) | last text, median (ms) "
          "| first audio before last text | audio s / wall s | text tok/s, audio on "
          "| text tok/s, audio off |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.concurrency} | {statistics.median(row.first_audio_s) * 1e3:.0f} "
              f"| {statistics.median(row.last_text_s) * 1e3:.0f} "
              f"| {row.audio_first} of {row.concurrency} | {row.rtf:.2f} "
              f"| {row.spoken.tok_s:.1f} | {row.text_only.tok_s:.1f} |")


def run(tokens: int, passes: int, serve_env: list[str],
        concurrency: tuple[int, ...] = CONCURRENCY) -> list[OmniRow]:
    """Save the tiny Qwen3-Omni, serve it, measure, stop the server; the rows."""
    import tempfile

    from benchmark.embed_latency import serve
    from benchmark.serve_matrix import stop

    with tempfile.TemporaryDirectory() as tmp:
        model = save_omni(Path(tmp) / "omni")
        env = ["MSTAR_DTYPE=float32", "MSTAR_DEVICE=cpu", f"MSTAR_SERVED_MODEL_NAMES={NAME}",
               f"MSTAR_MAX_SPEECH_SECONDS={speech_seconds(tokens)}", *serve_env]
        url, proc = serve(str(model), env)
        try:
            return measure(url, frame_rate(model), tokens, passes, concurrency)
        finally:
            stop(proc)
