"""The rows of the request-field table (see ``field_table``) for POST /v1/audio/transcriptions
and /v1/audio/translations: multipart form fields, arrays named ``name[]`` as OpenAI's clients
send them. Fragments are form fields merged into a minimal request (a one-second WAV ``file`` and
a ``language`` the multilingual test model knows); a ``file`` fragment replaces the file's bytes.
"""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import _rejected, _row

AUDIO = ("transcriptions", "translations")
TRANSCRIPTIONS = ("transcriptions",)
TRANSLATIONS = ("translations",)
DIARIZATION = "No diarization."

ROWS: list[dict[str, Any]] = [
    _row("file", AUDIO, "supported", "WAV, FLAC, MP3 or OGG (Vorbis, Opus), mixed down to mono "
         "and resampled to the model's rate. At most MSTAR_MAX_AUDIO_BYTES (413) and "
         "MSTAR_MAX_AUDIO_SECONDS, read from the header before decoding (413); an empty, "
         "truncated, damaged or other file is a 400 naming ``file``.", accepted={},
         refused={"file": ""}),
    _row("model", AUDIO, "supported", "The served speech model's name or an alias; may be "
         "omitted. A model that does not transcribe is a 400 naming ``model``.", accepted={},
         refused={"model": "no-such-model"}, refused_status=404),
    _row("language", TRANSCRIPTIONS, "supported", "ISO-639-1. An English-only model takes only "
         "``en``; a multilingual one needs it (no language detection).",
         accepted={"language": "fr"}, refused={"language": "xx"}),
    _row("language", TRANSLATIONS, "extra", "The audio's language, as for transcriptions (a "
         "multilingual model needs it); the output is English.", accepted={"language": "fr"},
         refused={"language": "xx"}),
    _row("prompt", AUDIO, "supported", "Whisper's previous-text prompt, for the first 30 s "
         "window; its last max_model_len / 2 - 1 tokens.", accepted={"prompt": "Hello."}),
    _row("response_format", AUDIO, "supported", "``json`` (default), ``text``, ``srt``, ``vtt``, "
         "``verbose_json`` (task, language, duration, segments); ``diarized_json`` is a 400.",
         accepted={"response_format": "srt"}, refused={"response_format": "diarized_json"}),
    _row("temperature", AUDIO, "supported", "0 .. 1; 0 is greedy. No temperature fallback.",
         accepted={"temperature": "0.2"}, refused={"temperature": "1.5"}),
    _row("stream", TRANSCRIPTIONS, "supported", "``true``: ``transcript.text.delta`` events (token "
         "by token for audio of at most 30 s; else one per segment as each 30 s window "
         "finishes), then ``transcript.text.done`` with the "
         "text and usage. With ``json`` and ``text`` only.", accepted={"stream": "true"},
         refused={"stream": "true", "response_format": "srt"}, param="stream"),
    _row("timestamp_granularities[]", TRANSCRIPTIONS, "supported", "``segment`` (needs "
         "``verbose_json``). ``word`` is a 400: word timestamps are not computed.",
         accepted={"timestamp_granularities[]": "segment", "response_format": "verbose_json"},
         refused={"timestamp_granularities[]": "word", "response_format": "verbose_json"}),
    _rejected("include[]", TRANSCRIPTIONS, "No token logprobs in transcriptions.", "logprobs"),
    _rejected("chunking_strategy", TRANSCRIPTIONS, "The audio is cut into Whisper's 30 s "
              "windows; no voice activity detection.", "auto"),
    _rejected("known_speaker_names[]", TRANSCRIPTIONS, DIARIZATION, "ann"),
    _rejected("known_speaker_references[]", TRANSCRIPTIONS, DIARIZATION,
              "data:audio/wav;base64,AAAA"),
    _rejected("languages[]", TRANSCRIPTIONS, "Give one language in ``language``.", "en"),
    _rejected("keywords[]", TRANSCRIPTIONS, "No keyword boosting.", "mstar"),
]
