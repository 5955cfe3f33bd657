"""Speech fixtures for the Whisper tests and benchmark/audio.py: espeak-ng (a Debian package) reads
ten known English sentences; each becomes a 16 kHz mono 16-bit WAV under test/fixtures/speech/,
with sentences.json mapping file -> text. Run once; the files are committed, so CI needs no
speech synthesizer:

    python scripts/make_speech_fixtures.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import soundfile
import soxr

OUT = Path(__file__).resolve().parent.parent / "test" / "fixtures" / "speech"
RATE = 16000
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her.",
    "The weather is nice today, so we will walk to the park.",
    "She sells sea shells by the sea shore.",
    "Open the window and let the fresh air in.",
    "My favorite color is blue and I like green apples.",
    "The train leaves the station at nine in the morning.",
    "We need more coffee before the meeting starts.",
    "Reading books is a good way to learn new words.",
    "Thank you very much for your help with this project.",
]


def speak(text: str, path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "175", "-w", str(raw), text],
                       check=True)
        audio, rate = soundfile.read(raw, dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    loud = (abs(audio) > 0.01).nonzero()[0]  # trim the silence around the speech (files stay small)
    audio = audio[max(0, loud[0] - rate // 10): loud[-1] + rate // 10]
    soundfile.write(path, soxr.resample(audio, rate, RATE), RATE, subtype="PCM_16")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    table = {}
    for i, text in enumerate(SENTENCES):
        name = f"sentence_{i:02d}.wav"
        speak(text, OUT / name)
        table[name] = text
    (OUT / "sentences.json").write_text(json.dumps(table, indent=2) + "\n")


if __name__ == "__main__":
    main()
