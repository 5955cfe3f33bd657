"""Speech out served: time to the first audio chunk and the real-time factor of
``POST /v1/audio/speech`` (``stream_format: "audio"``, pcm) at 1 and 8 concurrent requests,
against ``mstar serve`` on a tiny random CSM saved by this script (no hub), float32, CPU.

    PYTHONPATH=. .venv/bin/python -m benchmark.audio --speech-out [--frames 100] [--passes 2]

Each request says the same sentence with its own voice and makes exactly ``--frames`` frames
(the random model makes no end frame). Time to first audio: from sending the request to its
first pcm bytes (the codec's first window: ``CSM_CHUNK_FRAMES`` frames). Real-time factor here
is **seconds of audio per second of wall time** (higher is faster; above 1 is faster than
real time), over a round of ``c`` concurrent requests: the opposite way round from the
transcription table's. "tok/s of the text stream with audio on and off" (issue 35) needs a
model that makes text and speech at once: CSM makes no text, so it is printed as not measured
here; Qwen3-Omni's is ``benchmark.speech_omni`` (``--model omni``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

CONCURRENCY = (1, 8)
VOICES = 8
SENTENCE = "The quick brown fox jumps over the lazy dog, and then it rests in the sun."
CODEBOOKS, CODES, POSITIONS = 8, 64, 4096
BYTES_PER_SAMPLE = 2  # pcm: 16-bit mono
NO_TEXT = ("tok/s of the text stream, audio on and off: not measured on CSM (it makes no text; "
           "a model that makes text and speech at once: --speech-out --model omni)")


@dataclass
class Row:
    concurrency: int
    first_audio_s: list[float]  # per request: send to first pcm bytes
    audio_s: float  # seconds of audio the round made, all requests
    wall_s: float  # the round's wall time

    @property
    def rtf(self) -> float:
        """Seconds of audio per second of wall time."""
        return self.audio_s / self.wall_s


def word_tokenizer(text: str):
    """A word-level tokenizer of ``text``'s words and punctuation, a newline a token of its own
    (chat templates' turns end their role line with one), ``<unk>`` and ``<eos>``: the tiny
    speech models' (no hub)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    split = pre_tokenizers.Split(Regex(r"\w+|[^\w\s]+|\n"), "removed", invert=True)
    words = ["<unk>", "<eos>", "\n", *sorted({w for w, _ in split.pre_tokenize_str(text)} - {"\n"})]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = split
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def save_csm(path: Path) -> Path:
    """A tiny random CSM (a 4-layer 128-wide backbone, 8 codebooks of 64 codes, a small Mimi at
    24 kHz) with a word-level tokenizer of the sentence's words (``word_tokenizer``), saved at
    ``path``."""
    import torch
    from transformers import CsmConfig, CsmForConditionalGeneration

    tok = word_tokenizer(SENTENCE)
    depth = dict(num_codebooks=CODEBOOKS, backbone_hidden_size=128, vocab_size=CODES,
                 hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=CODEBOOKS + 1)
    mimi = dict(model_type="mimi", hidden_size=32, num_filters=8, upsampling_ratios=[8, 6, 5, 4],
                codebook_size=CODES, codebook_dim=16, num_quantizers=CODEBOOKS,
                vector_quantization_hidden_dimension=16, upsample_groups=32,
                num_hidden_layers=2, intermediate_size=64, num_attention_heads=4,
                num_key_value_heads=4, sliding_window=32)
    config = CsmConfig(num_codebooks=CODEBOOKS, vocab_size=CODES, text_vocab_size=len(tok),
                       hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=POSITIONS, pad_token_id=1, bos_token_id=0,
                       audio_token_id=2, audio_eos_token_id=3, codebook_pad_token_id=CODES - 1,
                       codebook_eos_token_id=0, depth_decoder_config=depth, codec_config=mimi)
    torch.manual_seed(0)
    CsmForConditionalGeneration(config).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


async def _speak(client: httpx.AsyncClient, url: str, voice: int, frames: int
                 ) -> tuple[float, int]:
    """(seconds to the first pcm bytes, pcm bytes) of one streamed request."""
    body = {"input": SENTENCE, "voice": str(voice), "max_frames": frames,
            "response_format": "pcm", "stream_format": "audio"}
    start, first, size = time.perf_counter(), None, 0
    async with client.stream("POST", url + "/v1/audio/speech", json=body) as resp:
        resp.raise_for_status()
        async for chunk in resp.aiter_bytes():
            if first is None and chunk:
                first = time.perf_counter() - start
            size += len(chunk)
    if first is None:
        raise RuntimeError("a request made no audio")
    return first, size


async def round_of(url: str, concurrency: int, frames: int, rate: int) -> Row:
    """``concurrency`` requests at once, each of its own voice."""
    async with httpx.AsyncClient(timeout=httpx.Timeout(600)) as client:
        start = time.perf_counter()
        done = await asyncio.gather(*(_speak(client, url, i % VOICES, frames)
                                      for i in range(concurrency)))
        wall = time.perf_counter() - start
    samples = sum(size for _, size in done) / BYTES_PER_SAMPLE
    return Row(concurrency, [first for first, _ in done], samples / rate, wall)


def measure(url: str, rate: int, frames: int, passes: int,
            concurrency: tuple[int, ...] = CONCURRENCY) -> list[Row]:
    """Each concurrency's best round (by real-time factor) of ``passes``, after a warm-up."""
    asyncio.run(round_of(url, 1, frames, rate))  # warm-up
    return [max((asyncio.run(round_of(url, c, frames, rate)) for _ in range(passes)),
                key=lambda row: row.rtf) for c in concurrency]


def report(rows: list[Row], frames: int) -> None:
    print(f"speech out: tiny random CSM, {frames} frames a request")
    print("| concurrent requests | first audio, median (ms) | audio s / wall s |")
    print("|---|---|---|")
    for row in rows:
        print(f"| {row.concurrency} | {statistics.median(row.first_audio_s) * 1e3:.0f} "
              f"| {row.rtf:.2f} |")
    print(NO_TEXT)


def run(frames: int, passes: int, serve_env: list[str],
        concurrency: tuple[int, ...] = CONCURRENCY) -> list[Row]:
    """Save the tiny CSM, serve it, measure, stop the server; the rows."""
    import json
    import tempfile

    from benchmark.embed_latency import serve
    from benchmark.serve_matrix import stop
    from mstar.models.speech.utterance import FRAMES_PER_SECOND

    with tempfile.TemporaryDirectory() as tmp:
        model = save_csm(Path(tmp) / "csm")
        rate = json.loads((model / "config.json").read_text())["codec_config"]["sampling_rate"]
        env = ["MSTAR_DTYPE=float32", "MSTAR_DEVICE=cpu",
               f"MSTAR_MAX_SPEECH_SECONDS={POSITIONS / FRAMES_PER_SECOND}", *serve_env]
        url, proc = serve(str(model), env)
        try:
            return measure(url, rate, frames, passes, concurrency)
        finally:
            stop(proc)
