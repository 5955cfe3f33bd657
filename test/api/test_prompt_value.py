"""The one prompt value and the one OpenAI-message media reader: what ``mstar.LLM.chat`` and the API
server both read out of a conversation, and the value's trip over the wire to a worker."""

from __future__ import annotations

import base64
import io

import pytest
import torch
from PIL import Image

from mstar.api_server.media.parts import image_parts, message_dicts
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.models.vision.inputs import ImageInput
from mstar.prompt.chat_media import has_media, media_refs, offline_picture, template_messages
from mstar.prompt.value import Prompt


def _png(color: str) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


RED, BLUE = _png("red"), _png("blue")
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Compare"},
                                 {"type": "image_url", "image_url": {"url": RED}},
                                 {"type": "image_url", "image_url": {"url": BLUE, "detail": "auto"}}]},
]


def test_media_parts_are_read_in_order_and_named_by_their_place():
    refs = media_refs(CONVERSATION)
    assert [(r.param, r.url, r.detail) for r in refs] == [
        ("messages.1.content.1", RED, None), ("messages.1.content.2", BLUE, "auto")]
    assert has_media(CONVERSATION) and not has_media(CONVERSATION[:1])


def test_the_template_gets_one_marker_per_media_part_and_the_text_parts():
    rendered = template_messages(CONVERSATION)
    assert rendered[0] == CONVERSATION[0]
    assert rendered[1]["content"] == [{"type": "text", "text": "Compare"}, {"type": "image"},
                                      {"type": "image"}]


def test_the_server_checks_the_parts_the_offline_reader_finds():
    req = ChatCompletionRequest.model_validate({"messages": CONVERSATION})
    dumped = message_dicts(req.messages)
    assert template_messages(dumped) == template_messages(CONVERSATION)
    assert [(p.param, p.url) for p in image_parts(dumped, True, 8)] == [
        (f"{r.param}.image_url", r.url) for r in media_refs(CONVERSATION)]


def test_an_offline_part_is_a_data_url_or_a_picture():
    refs = media_refs([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": RED}},
        {"type": "image", "image": Image.new("L", (2, 2))},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}])
    assert offline_picture(refs[0]).getpixel((0, 0)) == (255, 0, 0)
    assert offline_picture(refs[1]).mode == "RGB"
    with pytest.raises(ValueError, match="data: URLs only"):
        offline_picture(refs[2])


def test_a_prompt_crosses_the_wire_with_its_parts():
    image = ImageInput("h1", {"pixel_values": torch.arange(6, dtype=torch.float32).view(2, 3)},
                       (1, 2, 3))
    prompt = Prompt([7, 9, 9, 9, 8], (image,))
    sent = m.decode(m.encode(m.AddRequest.of("r-0", prompt, SamplingParams(max_tokens=2))))
    back = sent.prompt()
    assert back.token_ids == prompt.token_ids and back.images == back.parts
    (got,) = back.images
    assert (got.content_hash, got.positions) == ("h1", (1, 2, 3))
    assert torch.equal(got.tensors["pixel_values"], image.tensors["pixel_values"])
    assert m.AddRequest.of("r-1", Prompt([1]), SamplingParams()).parts == []
