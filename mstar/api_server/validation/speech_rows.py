"""The rows of the request-field table (see ``field_table``) for POST /v1/audio/speech (a JSON
body). Fragments are merged into a minimal request (``input`` and a short ``max_frames``), sent
to a served CSM (``test/api/test_speech_serve.py``)."""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import _rejected, _row

SPEECH = ("speech",)

ROWS: list[dict[str, Any]] = [
    _row("model", SPEECH, "supported", "The served speech model's name or an alias; may be "
         "omitted. A model whose graph emits no audio is a 400 naming ``model``; another name "
         "a 404.", accepted={}, refused={"model": "no-such-model"}, refused_status=404),
    _row("input", SPEECH, "supported", "The text to say, as CSM's turn ``[voice]input``: at "
         "most MSTAR_MAX_SPEECH_INPUT_CHARS characters (longer is a 400), and under the prompt "
         "bounds of every route (MSTAR_MAX_PROMPT_CHARS: 413; it must leave room in "
         "max_model_len). Empty is a 400.", accepted={"input": "Hi."},
         refused={"input": ""}),
    _row("voice", SPEECH, "supported", "A speaker id, ``\"0\"`` .. ``\"9\"`` (default "
         "``\"0\"``); OpenAI's voice names are a 400.", accepted={"voice": "1"},
         refused={"voice": "alloy"}),
    _row("response_format", SPEECH, "supported", "``wav`` (the default: 16-bit mono at the "
         "codec's rate, 24 kHz for CSM), ``pcm`` (the same samples raw, little-endian), "
         "``flac`` (the same samples, lossless), ``mp3`` or ``opus`` (Ogg Opus; both at the "
         "lowest rate their codec takes from the codec's rate up), encoded by libsndfile; "
         "``aac`` is a 400 (libsndfile has no AAC encoder).",
         accepted={"response_format": "opus"}, refused={"response_format": "aac"}),
    _row("speed", SPEECH, "supported", "1.0 only: the audio is not time-stretched; another "
         "value is a 400.", accepted={"speed": 1.0}, refused={"speed": 1.5}),
    _rejected("instructions", SPEECH, "this model takes no style prompt.", "Cheerfully.",
              allowed=(None, "")),
    _row("stream_format", SPEECH, "supported", "``audio``: the bytes as each codec window "
         "decodes (every 320 ms of audio) for ``wav`` (a header whose RIFF and data sizes are "
         "0xFFFFFFFF, the streaming convention, comes first), ``pcm`` and ``opus`` (in Ogg "
         "pages of about 1 s); ``flac`` and ``mp3`` are whole files only (their encoders go back "
         "to fill in a header). ``sse`` (with ``pcm``): ``speech.audio.delta`` events of base64 "
         "pcm, then ``speech.audio.done`` with the usage. Any other pair is a 400 naming "
         "both fields (its param ``stream_format``).",
         accepted={"stream_format": "sse", "response_format": "pcm"},
         refused={"stream_format": "sse"}),
    _row("max_frames", SPEECH, "extra", "The most codec frames (12.5 a second), from 1 to "
         "MSTAR_MAX_SPEECH_SECONDS' frames (30 s, 375 frames by default; more is a 400); "
         "unset: that bound, cut to what max_model_len leaves after the prompt; given, it must "
         "fit.", accepted={"max_frames": 3}, refused={"max_frames": 0}),
]
