"""Image bytes to an RGB picture, in two steps so that every size limit is decided before any pixel
is decoded: ``open_image`` reads only the header (PIL's ``Image.open`` is lazy), refusing what is
not a PNG, JPEG or WebP image and anything larger than MSTAR_MAX_IMAGE_PIXELS, so a small file
that would decode to gigabytes (a decompression bomb) costs nothing; ``decoded`` then decodes it.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image, UnidentifiedImageError

from mstar.api_server.http.errors import APIError

FORMATS = ("PNG", "JPEG", "WEBP")
BYTES_PER_PIXEL = 4  # PIL holds a decoded RGB image in 32 bits per pixel


def open_image(data: bytes, max_pixels: int, param: str) -> Image.Image:
    """The image of ``data``, its header read and nothing decoded."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only
    except Image.DecompressionBombError as exc:  # PIL's own, far larger, limit
        raise APIError(413, f"`{param}`: the image is larger than MSTAR_MAX_IMAGE_PIXELS="
                       f"{max_pixels} pixels", param) from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise APIError(400, f"`{param}`: not a PNG, JPEG or WebP image", param) from exc
    width, height = image.size
    if width * height > max_pixels:
        raise APIError(413, f"`{param}`: the image is {width}x{height} = {width * height} "
                       f"pixels; MSTAR_MAX_IMAGE_PIXELS={max_pixels}", param)
    return image


def pixels(image: Image.Image) -> int:
    width, height = image.size
    return width * height


def decoded(image: Image.Image, param: str) -> Image.Image:
    """An opened image (``open_image``) decoded, as RGB."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise APIError(400, f"`{param}`: the image data is damaged ({exc})", param) from exc
    return image if image.mode == "RGB" else image.convert("RGB")


def decode_image(data: bytes, max_pixels: int, param: str) -> Image.Image:
    return decoded(open_image(data, max_pixels, param), param)
