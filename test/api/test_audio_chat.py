"""Chat completions and the Responses API with input_audio parts on an audio-in model (a tiny
Qwen2-Audio processor): the clip decoded, the processor's placeholders in the prompt, its features
the prompt's audio part, through the wire the workers decode; the official client unchanged."""

from __future__ import annotations

import base64

import pytest
from api_stub import StubEngine, app_on
from audio_files import encoded
from starlette.testclient import TestClient

from mstar.prompt import chat_media

alm_helpers = pytest.importorskip("alm_helpers")  # graph's tiny audio-in models (test/)
if not hasattr(chat_media, "AUDIO_TYPES"):  # audio joins chat_media on the graph branch
    pytest.skip("mstar.prompt.chat_media builds no audio prompts here", allow_module_level=True)

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
            "{{ m.content }}{% else %}{% for c in m.content %}{% if c.type == 'audio' %}"
            "<|audio_bos|><|AUDIO|><|audio_eos|>{% else %}{{ c.text }}{% endif %}{% endfor %}"
            "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
            "<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def served(tiny_tokenizer):
    _, processor = alm_helpers.FAMILIES["qwen2_audio"](tiny_tokenizer)
    processor.chat_template = TEMPLATE
    engine = StubEngine()
    app = app_on(engine, processor.tokenizer, modalities=("text", "audio"), processor=processor)
    return TestClient(app), engine, processor


def part(seconds: float = 1.0) -> dict:
    data = base64.b64encode(encoded("WAV", seconds, 44_100, channels=2)).decode()
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def test_chat_with_input_audio_builds_the_audio_prompt(served):
    client, engine, processor = served
    resp = client.post("/v1/chat/completions", json={"max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is said?"}, part()]}]})
    assert resp.status_code == 200, resp.text
    _, ids, _ = engine.submitted[-1]
    audio = processor.tokenizer.convert_tokens_to_ids("<|AUDIO|>")
    assert ids.count(audio) > 0


def test_the_openai_client_sends_input_audio_unchanged(served):
    import openai

    client, engine, _ = served
    api = openai.OpenAI(api_key="x", base_url="http://testserver/v1", http_client=client)
    got = api.chat.completions.create(model="stub-model", max_tokens=2, messages=[
        {"role": "user", "content": [{"type": "text", "text": "hi"}, part()]}])
    assert got.choices[0].message.content
    resp = client.post("/v1/responses", json={"max_output_tokens": 2, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}, part()]}]})
    assert resp.status_code == 200, resp.text
