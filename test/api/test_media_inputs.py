"""Image parts at the API's edge: where bytes may come from, what decodes, and the limits; each
refusal is a 4xx naming the part."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from mstar.api_server.http.errors import APIError
from mstar.api_server.media.decode import decode_image
from mstar.api_server.media.parts import image_parts, message_dicts
from mstar.api_server.media.sources import allowed_hosts, image_bytes
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest

P = "messages.0.content.1.image_url"
MB = 1 << 20


def encoded(fmt: str, size=(8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 10, 30)).save(out, format=fmt)
    return out.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def bomb_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height: tiny on disk, gigabytes if decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(b"IEND", b""))


def _refused(fn, *args) -> APIError:
    with pytest.raises(APIError) as err:
        fn(*args)
    return err.value


@pytest.mark.parametrize("fmt,media_type", [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                            ("WEBP", "image/webp")])
def test_data_urls_of_each_format_decode(fmt, media_type):
    data = image_bytes(data_url(encoded(fmt), media_type), frozenset(), MB, P)
    assert decode_image(data, 10_000, P).size == (8, 6)


@pytest.mark.parametrize("url,status", [
    ("data:image/png;base64,@@not base64@@", 400),
    ("data:text/plain;base64,aGVsbG8=", 400),
    ("data:image/png,rawbytes", 400),
    ("file:///etc/passwd", 400),
    ("ftp://example.com/a.png", 400),
    ("http://169.254.169.254/latest/meta-data", 400),
    ("https://example.com/a.png", 400),
])
def test_bad_sources_are_refused_naming_the_part(url, status):
    err = _refused(image_bytes, url, frozenset(), MB, P)
    assert (err.status, err.param) == (status, P)


def test_a_remote_host_is_fetched_only_when_listed():
    hosts = allowed_hosts(" Images.Example.com ,cdn.example.org")
    assert hosts == {"images.example.com", "cdn.example.org"}
    err = _refused(image_bytes, "https://evil.example.com/a.png", hosts, MB, P)
    assert "MSTAR_ALLOWED_MEDIA_DOMAINS" in err.message


def test_too_many_bytes_is_a_413():
    err = _refused(image_bytes, data_url(encoded("PNG", (64, 64))), frozenset(), 100, P)
    assert (err.status, err.param) == (413, P)


def test_a_non_image_payload_is_a_400():
    err = _refused(decode_image, b"%PDF-1.4 definitely not a picture", 10_000, P)
    assert (err.status, err.param) == (400, P)


@pytest.mark.parametrize("side", [300, 20_000])
def test_a_decompression_bomb_is_refused_from_its_header(side):
    data = bomb_png(side, side)
    assert len(data) < 200
    err = _refused(decode_image, data, 256 * 256, P)
    assert (err.status, err.param) == (413, P)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_anything_but_a_4xx(data):
    try:
        decode_image(data, 10_000, P)
    except APIError as err:
        assert err.status in (400, 413) and err.param == P


def _chat(*parts) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]}]})


IMG = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def test_parts_are_found_in_order_and_counted():
    parts = image_parts(message_dicts(_chat(IMG, IMG).messages), True, 2)
    assert [p.param for p in parts] == [P, "messages.0.content.2.image_url"]
    err = _refused(image_parts, message_dicts(_chat(IMG, IMG, IMG).messages), True, 2)
    assert err.param == "messages.0.content.3.image_url"


def test_a_text_only_model_refuses_the_part():
    err = _refused(image_parts, message_dicts(_chat(IMG).messages), False, 8)
    assert (err.status, err.param) == (400, "messages.0.content.1")


def test_detail_auto_is_taken_and_other_values_refused_by_name():
    auto = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                               "detail": "auto"}}
    assert len(image_parts(message_dicts(_chat(auto).messages), True, 8)) == 1
    high = {"type": "image_url", "image_url": {"url": "data:,", "detail": "high"}}
    err = _refused(image_parts, message_dicts(_chat(high).messages), True, 8)
    assert err.param == "messages.0.content.1.image_url.detail"
