"""An image part's URL to bytes.

``data:`` URLs (base64) are always taken. ``http(s)`` URLs are fetched only from hosts listed in
MSTAR_ALLOWED_MEDIA_DOMAINS (unset: none), so a request cannot make the server reach its own
network (server-side request forgery); the fetch itself, bounded in time, rate and concurrency,
is ``fetch.py``'s. Every other scheme, ``file:`` included, is a 400.
"""

from __future__ import annotations

import base64
import binascii
from urllib.parse import urlsplit

from mstar.api_server.http.errors import APIError

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp")


def allowed_hosts(setting: str | None) -> frozenset[str]:
    return frozenset(h.strip().lower() for h in (setting or "").split(",") if h.strip())


def image_bytes(url: str, hosts: frozenset[str], max_bytes: int, param: str) -> bytes | None:
    """The image's bytes when the URL carries them (``data:``); None for the URL of an allowed
    host, to be fetched (``fetch.py``); any other URL is refused."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return data_url_bytes(url, max_bytes, param)
    if scheme in ("http", "https"):
        check_host(url, hosts, param)
        return None
    raise APIError(400, f"`{param}`: only data: URLs and http(s) URLs of allowed hosts are "
                   f"taken, not {scheme or 'a relative'!r} URLs", param)


def data_url_bytes(url: str, max_bytes: int, param: str) -> bytes:
    header, sep, payload = url[5:].partition(",")
    media_type, *options = header.split(";")
    if not sep or "base64" not in options:
        raise APIError(400, f"`{param}`: a data: URL must be 'data:<image type>;base64,<data>'",
                       param)
    if media_type.lower() not in MEDIA_TYPES:
        raise APIError(400, f"`{param}`: media type {media_type[:40]!r} is not one of "
                       f"{', '.join(MEDIA_TYPES)}", param)
    if len(payload) * 3 // 4 > max_bytes + 2:  # refused before decoding the base64
        raise too_large(param, max_bytes)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise APIError(400, f"`{param}`: malformed base64 ({exc})", param) from exc
    if len(data) > max_bytes:
        raise too_large(param, max_bytes)
    return data


def check_host(url: str, hosts: frozenset[str], param: str) -> None:
    host = (urlsplit(url).hostname or "").lower()
    if host not in hosts:
        raise APIError(400, f"`{param}`: host {host[:100]!r} is not in MSTAR_ALLOWED_MEDIA_DOMAINS "
                       "(remote images are fetched only from the hosts listed there)", param)


def too_large(param: str, max_bytes: int) -> APIError:
    return APIError(413, f"`{param}`: the image is larger than MSTAR_MAX_IMAGE_BYTES="
                    f"{max_bytes} bytes", param)
