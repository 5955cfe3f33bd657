"""Images in requests: counts, sizes, allowed domains."""

from __future__ import annotations

from pydantic import BaseModel

from mstar.settings.knobs.field import MAX_COUNT, _media


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
    max_image_bytes: int = _media(
        20_971_520, "Largest image file (after base64 decoding, or as fetched): larger is a 413 "
        "naming the part.", unit="bytes", ge=1, le=2**34)
    max_encoder_tokens_per_step: int = _media(
        8192, "Image embedding rows (placeholder tokens) the vision encoder may produce in one "
        "engine step; an image larger than this alone still runs, in a step of its own.",
        unit="tokens", ge=1, le=MAX_COUNT)
    encoder_cache_mb: float = _media(
        256.0, "Memory for cached vision-encoder outputs, keyed by image content: a repeated "
        "image is encoded once while its output stays here. 0 turns the cache off.",
        unit="MiB", ge=0.0, le=1e7)
