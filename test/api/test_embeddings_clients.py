"""Client libraries against `mstar serve` on the built-in model, each written the way its docs
show: openai's ``embeddings.create`` and litellm's ``embedding()`` on POST /v1/embeddings, and a
pydantic-ai Agent with ``NativeOutput`` plus a tool on chat completions (a strict tool together
with a json_schema ``response_format``). The protocol is judged, not the 135M model's answers."""

from __future__ import annotations

import asyncio
import base64
import json

import httpx
import numpy as np
import pytest
from pydantic import BaseModel
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

openai = pytest.importorskip("openai")

MODEL = "SmolLM2-135M-Instruct"
HIDDEN_SIZE = 576  # the built-in model's: the length of every vector
TEXTS = ["a cat sat on the mat", "Paris is the capital of France.", "hi"]


@pytest.fixture(scope="module")
def client(builtin_server):
    return openai.OpenAI(base_url=builtin_server.url + "/v1", api_key="x", max_retries=0,
                         timeout=120)


def _unit(vector) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32)
    assert v.shape == (HIDDEN_SIZE,)
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-4
    return v


def test_openai_embeddings_float_and_base64_batched(client, builtin_server):
    batch = client.embeddings.create(model=MODEL, input=TEXTS)
    assert [d.index for d in batch.data] == [0, 1, 2] and batch.model == MODEL
    vectors = [_unit(d.embedding) for d in batch.data]
    counts = [httpx.post(f"{builtin_server.url}/tokenize", json={"prompt": t}).json()["count"]
              for t in TEXTS]
    assert batch.usage.prompt_tokens == batch.usage.total_tokens == sum(counts)
    # The same input alone, as numbers and as base64 (the SDK's default asks for base64 and
    # decodes it itself): the same vector whatever the batch.
    alone = client.embeddings.create(model=MODEL, input=TEXTS[1], encoding_format="float")
    assert np.dot(_unit(alone.data[0].embedding), vectors[1]) > 0.999
    raw = client.embeddings.create(model=MODEL, input=[TEXTS[1]], encoding_format="base64")
    packed = raw.data[0].embedding
    assert isinstance(packed, str)
    assert np.allclose(np.frombuffer(base64.b64decode(packed), "<f4"),
                       alone.data[0].embedding, atol=1e-6)
    default = client.embeddings.create(model=MODEL, input=[TEXTS[1]])  # SDK: base64 on the wire
    assert np.allclose(default.data[0].embedding, alone.data[0].embedding, atol=1e-6)
    assert np.dot(vectors[0], vectors[2]) < 0.9999  # different inputs, different vectors


def test_openai_embeddings_token_ids_and_refusals(client):
    by_ids = client.embeddings.create(model=MODEL, input=[[1, 2, 3], [4]])
    assert len(by_ids.data) == 2 and by_ids.usage.prompt_tokens == 4
    for kwargs, param in (({"input": "hi", "dimensions": 64}, "dimensions"),
                          ({"input": "hi " * 3000}, "input"),
                          ({"input": ["ok", ""]}, "input.1")):
        with pytest.raises(openai.BadRequestError) as exc:
            client.embeddings.create(model=MODEL, **kwargs)
        assert exc.value.body["param"] == param, exc.value.body


def test_litellm_embedding(builtin_server, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
    litellm = pytest.importorskip("litellm")
    out = litellm.embedding(model=f"openai/{MODEL}", api_base=builtin_server.url + "/v1",
                            api_key="x", input=TEXTS[:2])
    assert [d["index"] for d in out.data] == [0, 1]
    for d in out.data:
        _unit(d["embedding"])
    assert out.usage.prompt_tokens > 0


class Forecast(BaseModel):
    sunny: bool


def test_pydantic_ai_native_output_with_a_tool(builtin_server):
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    bodies: list[dict] = []

    async def record(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    async def run():
        http = httpx.AsyncClient(event_hooks={"request": [record]}, timeout=120)
        provider = OpenAIProvider(openai_client=openai.AsyncOpenAI(
            base_url=builtin_server.url + "/v1", api_key="x", max_retries=0, http_client=http))
        agent = pydantic_ai.Agent(OpenAIChatModel(MODEL, provider=provider),
                                  output_type=pydantic_ai.NativeOutput(Forecast),
                                  instructions="Answer about the weather.",
                                  model_settings={"temperature": 0, "max_tokens": 80})
        calls: list[str] = []

        @agent.tool_plain
        def get_weather(city: str) -> str:
            """The current weather in a city."""
            calls.append(city)
            return "18 degrees and sunny"

        try:
            result = await agent.run("Is it sunny in Paris?",
                                     usage_limits=UsageLimits(request_limit=3))
        except UsageLimitExceeded:  # the model kept calling its tool: the protocol held
            return None, calls
        finally:
            await http.aclose()
        return result.output, calls

    output, calls = asyncio.run(run())
    first = bodies[0]
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert first["response_format"]["type"] == "json_schema"
    assert isinstance(output, Forecast) or (output is None and calls)
