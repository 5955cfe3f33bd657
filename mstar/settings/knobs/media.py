"""Media in requests. Images: counts, sizes, allowed domains, and the bounds on fetching and
decoding them. Audio (category "Audio"): bytes, seconds and parts. Speech out (category
"Speech"): the text a speech request may say, the audio it may make, and its codec's memory.

None of these is reloadable (``settings/reloadable.py``): the fetch slots and the pixel budget
are built once when the API server starts, and the audio bounds are read then too; the
codec-memory bound is checked once when a worker loads a speech model.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel

from mstar.settings.knobs.field import MAX_COUNT, MAX_WAIT_S, _media, knob

_audio = functools.partial(knob, category="Audio")
_speech = functools.partial(knob, category="Speech")
# The seconds of speech a request makes when it names no bound (OpenAI's speech route has none;
# 30 s is 375 frames of CSM's Mimi). Offline ``Speaker`` (transformers' reference) defaults to it.
DEFAULT_SPEECH_SECONDS = 30.0


class MediaKnobs(BaseModel):
    allowed_media_domains: str | None = _media(
        None, "Host names (a comma list, matched exactly) whose http(s) image URLs the server "
        "fetches. Unset: none, so only data: URLs are taken (a remote URL is a 400); file: URLs "
        "never are. A security setting: any problem with it is an error.", security=True)
    max_images_per_request: int = _media(
        8, "Images one chat request may carry; more are a 400 naming the first part over it.",
        unit="images", ge=0, le=1024)
    max_image_pixels: int = _media(
        16_777_216, "Largest image (width x height) accepted, read from the file header before "
        "decoding (a decompression bomb is refused unread): larger is a 413 naming the part.",
        unit="pixels", ge=1, le=2**40)
    max_image_pixels_per_request: int = _media(
        67_108_864, "Most pixels (width x height, summed over its images) one request may have "
        "decoded, read from the headers before any image is decoded: the part that takes the sum "
        "past it is a 413 naming it. A decoded pixel holds 4 bytes.",
        unit="pixels", ge=1, le=2**40)
    max_image_pixels_in_flight: int = _media(
        134_217_728, "Most pixels decoded at once across all requests in flight (4 bytes each: "
        "the default is 512 MiB). A request whose images do not fit waits for room, within "
        "MSTAR_REQUEST_TIMEOUT_S; one that could never fit is a 413 naming the part.",
        unit="pixels", ge=1, le=2**40)
    media_fetch_max_concurrent: int = _media(
        8, "Remote (http/https) image fetches running at once across all requests; more wait for "
        "a slot, within MSTAR_REQUEST_TIMEOUT_S. data: images never wait for these.",
        unit="fetches", ge=1, le=4096)
    media_fetch_connect_timeout_s: float = _media(
        5.0, "How long connecting to an image's host may take; longer is a 400 naming the part.",
        unit="s", gt=0.0, le=MAX_WAIT_S)
    media_fetch_timeout_s: float = _media(
        30.0, "How long one remote image fetch may take in all (connecting, waiting for a slot "
        "excluded); longer is a 400 naming the part. MSTAR_REQUEST_TIMEOUT_S still bounds the "
        "whole request.", unit="s", gt=0.0, le=MAX_WAIT_S)
    media_fetch_min_bytes_per_s: int = _media(
        32_768, "Slowest average rate at which a remote image's body may arrive, after its first "
        "second; slower (a host dripping bytes) is a 400 naming the part. 0: no minimum.",
        unit="bytes/s", ge=0, le=2**34)
    max_image_bytes: int = _media(
        20_971_520, "Largest image file (after base64 decoding, or as fetched): larger is a 413 "
        "naming the part.", unit="bytes", ge=1, le=2**34)
    max_encoder_tokens_per_step: int = _media(
        8192, "Embedding rows (placeholder tokens) each encoder node of the model's walk graph "
        "(vision, audio) may produce in one engine step; a part larger than this alone still "
        "runs, in a step of its own.",
        unit="tokens", ge=1, le=MAX_COUNT)
    encoder_cache_mb: float = _media(
        256.0, "Memory for cached encoder outputs (images, audio clips), keyed by the part's "
        "content: a repeated part is encoded once while its output stays here. 0 turns the "
        "cache off.",
        unit="MiB", ge=0.0, le=1e7)
    # -- audio (a transcription's ``file``, a chat's ``input_audio`` parts): each bound is
    # checked against the header before anything is decoded, and the decode itself stops at the
    # seconds bound whatever the header said.
    max_audio_bytes: int = _audio(
        26_214_400, "Largest audio file (a transcription's upload, or an input_audio part after "
        "base64 decoding): larger is a 413 naming the part.", unit="bytes", ge=1, le=2**34)
    max_audio_seconds: float = _audio(
        1800.0, "Longest audio part, read from its header before decoding (a header claiming "
        "more is a 413 naming the part) and enforced while decoding. Decoded audio is kept at the "
        "model's rate (16 kHz for Whisper: 64 KB a second).", unit="s", gt=0.0, le=86_400.0)
    max_audio_seconds_per_request: float = _audio(
        1800.0, "Most audio seconds one request may carry, summed over its parts in order from "
        "their headers: the part that takes the sum past it is a 413 naming it.",
        unit="s", gt=0.0, le=86_400.0)
    max_audio_parts_per_request: int = _audio(
        8, "input_audio parts one chat or Responses request may carry; more are a 400 naming the "
        "first part over it.", unit="parts", ge=0, le=1024)
    # -- speech out (POST /v1/audio/speech): each bound is one function
    # (``api_server.audio.speak_bounds``, ``worker.speech_out``); docs/speech.rst says more.
    max_speech_input_chars: int = _speech(
        4096, "Longest text one speech request may say (its ``input``, OpenAI's limit): longer "
        "is a 400 naming ``input``. MSTAR_MAX_PROMPT_CHARS and max_model_len bound its tokens "
        "too.", unit="characters", ge=1, le=2**24)
    max_speech_seconds: float = _speech(
        DEFAULT_SPEECH_SECONDS, "Most audio one speech request may make, in seconds of the "
        "codec's frames (CSM: 12.5 a second, so 30 s is 375 frames). A ``max_frames`` over it is "
        "a 400 naming ``max_frames``; unset, a request makes at most this much (less when "
        "max_model_len leaves less room after the prompt).", unit="s", gt=0.0, le=86_400.0)
    max_speech_codec_bytes: int = _speech(
        4_194_304, "Most memory a speech model's codec node may hold for one request between "
        "chunks: its window of frames' codes and one window's decoded samples (float32). Fixed "
        "by the model (its graph's window, codebooks and samples per frame), so it is checked "
        "once, when a worker loads the model: a model whose window needs more does not start, "
        "and every request it admits stays within it (CSM: 12 frames, about 92 KiB).",
        unit="bytes", ge=1, le=2**34)
    # Qwen3-Omni's code2wav windows as served (``engine.chain.speech_chain``): its graph
    # declares transformers' 300 after 25 (the parity reference), whose first audio comes 24 s
    # of talker frames in: the whole reply, mostly.
    speech_chunk_frames: int = _speech(
        25, "Frames of a chained speech model's talker (Qwen3-Omni) that code2wav decodes per "
        "chunk: the first audio waits for this many (12.5 a second: 25 is 2 s). transformers' "
        "own is 300 (24 s). CSM's windows are its graph's (4 after 8).",
        unit="frames", ge=1, le=MAX_COUNT)
    speech_left_context: int = _speech(
        25, "Frames before each chunk code2wav decodes again for continuity, their samples "
        "dropped (MSTAR_SPEECH_CHUNK_FRAMES's left context; transformers' is 25). Each chunk's "
        "decode is of this many plus MSTAR_SPEECH_CHUNK_FRAMES frames.",
        unit="frames", ge=0, le=MAX_COUNT)
