"""`mstar serve` of a saved tiny random SmolVLM, driven by the official openai client: a data:
image gives transformers' tokens, another image another answer, a repeated image an encoder-cache
hit in /metrics; every bad image part is a 4xx naming it while /health stays green."""

from __future__ import annotations

import base64
import io
import re
import time

import httpx
import pytest
from serve_helpers import running_server
from test_media_inputs import bomb_png
from vlm_helpers import image, make_tiny_vlm, prompt_text, transformers_greedy

from mstar.models.vision.inputs import build_prompt, load_processor

MAX_NEW = 16
QUESTION = "Describe the picture."


def _png(picture) -> str:
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory, tiny_tokenizer):
    return make_tiny_vlm("smolvlm", tiny_tokenizer, tmp_path_factory.mktemp("smolvlm"))


@pytest.fixture(scope="module")
def server(vlm_dir, tmp_path_factory):
    yield from running_server(vlm_dir, tmp_path_factory.mktemp("vlm") / "s.log", {
        "MSTAR_DTYPE": "float32", "MSTAR_MAX_IMAGES_PER_REQUEST": "2",
        "MSTAR_MAX_IMAGE_PIXELS": "1000000", "MSTAR_NUM_KV_BLOCKS": "256"})


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _ask(client, *urls: str, text: str = QUESTION):
    content = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    content.append({"type": "text", "text": text})
    return client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": content}],
        max_tokens=MAX_NEW, temperature=0)


def _metric(server, name: str) -> float:
    body = httpx.get(server.url + "/metrics").text
    return float(re.search(rf"^{name} (\S+)$", body, re.M).group(1))


def test_models_lists_the_image_modality(server):
    card = httpx.get(server.url + "/v1/models").json()["data"][0]
    assert card["modalities"] == ["text", "image"]


def test_data_image_matches_transformers_and_the_image_matters(client, vlm_dir, server):
    processor = load_processor(vlm_dir)
    text = prompt_text(processor, QUESTION, 1)
    pictures = [image(1), image(7, (40, 48))]
    answers = []
    for picture in pictures:
        expected = transformers_greedy(vlm_dir, text, [picture], MAX_NEW)
        resp = _ask(client, _png(picture))
        assert resp.choices[0].message.content == processor.tokenizer.decode(
            expected, skip_special_tokens=True)
        ids, _ = build_prompt(processor, text, [picture])
        assert resp.usage.prompt_tokens == len(ids)  # the image's placeholders count
        answers.append(resp.choices[0].message.content)
    assert answers[0] != answers[1]


def test_the_same_image_twice_is_one_encoder_cache_hit(client, server):
    url = _png(image(11))
    _ask(client, url)
    hits = _metric(server, "mstar_encoder_cache_hits")
    _ask(client, url, text="Again?")
    for _ in range(50):  # worker stats arrive asynchronously
        if _metric(server, "mstar_encoder_cache_hits") == hits + 1:
            break
        time.sleep(0.1)
    assert _metric(server, "mstar_encoder_cache_hits") == hits + 1


def _b64(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode()


@pytest.mark.parametrize("urls,status,param", [
    (["data:image/png;base64,%%%not-base64"], 400, "messages.0.content.0.image_url"),
    ([_b64(b"this is plain text, not a picture")], 400, "messages.0.content.0.image_url"),
    ([_b64(bomb_png(20_000, 20_000))], 413, "messages.0.content.0.image_url"),
    (["https://example.com/cat.png"], 400, "messages.0.content.0.image_url"),
    (["file:///etc/passwd"], 400, "messages.0.content.0.image_url"),
    ([_b64(b"x")] * 3, 400, "messages.0.content.2.image_url"),
])
def test_bad_image_parts_are_4xx_naming_the_part(client, server, urls, status, param):
    from openai import APIStatusError

    with pytest.raises(APIStatusError) as err:
        _ask(client, *urls)
    assert err.value.status_code == status
    assert err.value.body["param"] == param
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
