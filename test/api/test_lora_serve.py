"""LoRA adapters through `mstar serve` and the openai client: each adapter is a model name whose
greedy tokens equal transformers + PEFT merge_and_unload(); run-time load and unload (vLLM's
routes, behind the API key, only inside MSTAR_LORA_DIR) lose no request in flight."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from lora_helpers import ATTN, MLP, make_adapter, merged_greedy
from serve_helpers import running_server, wait_idle

openai = pytest.importorskip("openai")

KEY = "lora-key"
MAX_NEW = 8
BUSY = 24  # the requests in flight across a run-time unload
PROMPT = "Paris is the capital of France, and Berlin"


@pytest.fixture(scope="module")
def lora_dir(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora-dir")
    base = tiny_model_dir("llama")
    make_adapter(base, root / "attn", 11, ATTN)
    make_adapter(base, root / "mlp", 12, MLP)
    make_adapter(base, root / "late", 13, ATTN + MLP)  # loaded at run time
    return root


@pytest.fixture(scope="module")
def server(tiny_model_dir, lora_dir, tmp_path_factory):
    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("lora") / "s.log", {
        "MSTAR_API_KEY": KEY, "MSTAR_DTYPE": "float32", "MSTAR_KV_BLOCK_SIZE": "4",
        "MSTAR_LORA_MODULES": f"attn={lora_dir / 'attn'},mlp={lora_dir / 'mlp'}",
        "MSTAR_MAX_LORA_RANK": "8", "MSTAR_MAX_LORAS": "2",
        "MSTAR_ALLOW_RUNTIME_LORA_UPDATING": "true", "MSTAR_LORA_DIR": str(lora_dir)})


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def _text(client, model: str) -> str:
    out = client.completions.create(model=model, prompt=PROMPT, max_tokens=MAX_NEW,
                                    temperature=0)
    return _tail(out.choices[0].text)


def _tail(text: str) -> str:
    return text.rstrip("\ufffd")


def _reference_text(tiny_model_dir, tiny_tokenizer, adapter, max_new: int = MAX_NEW) -> str:
    """The reference tokens' text, without trailing replacement characters: the random model
    emits byte tokens, and the server holds back a last character whose UTF-8 bytes are
    incomplete (``_tail`` strips the server's text alike)."""
    ids = tiny_tokenizer.encode(PROMPT)
    [tokens] = merged_greedy(tiny_model_dir("llama"), adapter, [ids], max_new)
    return tiny_tokenizer.decode(tokens).rstrip("\ufffd")


def test_models_lists_adapters_with_their_parent(client, server):
    cards = {card.id: card for card in client.models.list().data}
    base = server.model_dir.name
    assert {"attn", "mlp"} <= set(cards)
    assert cards["attn"].model_extra["parent"] == cards["mlp"].model_extra["parent"]
    assert cards["attn"].model_extra["parent"] in cards and cards[base].model_extra["parent"] is None


def test_each_adapter_matches_merged_reference(client, server, tiny_model_dir, tiny_tokenizer,
                                                lora_dir):
    base = server.model_dir.name
    texts = {name: _text(client, name) for name in (base, "attn", "mlp")}
    for name, text in texts.items():
        adapter = None if name == base else lora_dir / name
        assert text == _reference_text(tiny_model_dir, tiny_tokenizer, adapter), name
    assert len(set(texts.values())) == 3


def test_unknown_adapter_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.completions.create(model="nope", prompt=PROMPT, max_tokens=2)
    assert err.value.code == "model_not_found"


def test_runtime_load_needs_key_and_stays_inside_lora_dir(server, lora_dir, tmp_path):
    url = server.url + "/v1/load_lora_adapter"
    body = {"lora_name": "x", "lora_path": str(lora_dir / "late")}
    assert httpx.post(url, json=body).status_code == 401
    outside = {"lora_name": "x", "lora_path": str(tmp_path)}
    resp = httpx.post(url, json=outside, headers=server.headers)
    assert resp.status_code == 403 and resp.json()["error"]["param"] == "lora_path"
    sneaky = {"lora_name": "x", "lora_path": "../" + tmp_path.name}
    assert httpx.post(url, json=sneaky, headers=server.headers).status_code == 403


def test_load_and_unload_under_load_lose_no_request(server, client, lora_dir, tiny_model_dir,
                                                    tiny_tokenizer):
    """16 streams for a run-time-loaded adapter, two start-up ones and the base are running
    (each has sent its first chunk) when one of their adapters is unloaded: all finish with the
    reference text, and only new requests for it get a 404."""
    base = server.model_dir.name

    async def run() -> list[str]:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY,
                                      max_retries=0) as aclient, \
                httpx.AsyncClient(base_url=server.url, headers=server.headers,
                                  timeout=60) as http:
            load = await http.post("/v1/load_lora_adapter",
                                   json={"lora_name": "late", "lora_path": "late"})
            assert load.status_code == 200, load.text
            streams = [await aclient.completions.create(model=m, prompt=PROMPT, max_tokens=BUSY,
                                                        temperature=0, stream=True)
                       for m in ["late", "attn", "mlp", base] * 4]
            firsts = [(await s.__anext__()).choices[0].text for s in streams]
            unload = await http.post("/v1/unload_lora_adapter", json={"lora_name": "mlp"})
            assert unload.status_code == 200, unload.text
            texts = []
            for first, stream in zip(firsts, streams, strict=True):
                rest = [chunk.choices[0].text async for chunk in stream]
                texts.append(_tail(first + "".join(rest)))
            return texts

    texts = asyncio.run(run())
    for k, name in enumerate(["late", "attn", "mlp", None]):
        ref = _reference_text(tiny_model_dir, tiny_tokenizer, name and lora_dir / name, BUSY)
        assert texts[k::4] == [ref] * 4, name
    with pytest.raises(openai.NotFoundError):  # gone for new requests
        client.completions.create(model="mlp", prompt=PROMPT, max_tokens=2)
    assert "late" in {card.id for card in client.models.list().data}


def test_metrics_count_requests_per_adapter_and_loads(server):
    """After the tests above: requests per adapter, the three loads (two at start, one at run
    time), and evictions (three adapters ran at once in the run-time test on two slots)."""
    wait_idle(server)  # a worker sends its counters when it goes idle
    assert server.metric('mstar_lora_requests_total{adapter="late"}') >= 4
    assert server.metric("mstar_lora_loads") == 3
    assert server.metric("mstar_lora_evictions") >= 1
