"""Keys, scopes and quotas through the HTTP layer on a stub engine (MSTAR_API_KEYS_FILE): 401 and
403, 429 in OpenAI's shape with Retry-After and x-ratelimit-* headers, token quotas, the model
allow-list, per-key metrics, and a SIGHUP reload (new limits for the next request, a bad file
keeping the old keys). The buckets' arithmetic is checked on ``Quotas`` with a fake clock."""

from __future__ import annotations

import pytest
from api_stub import STUB_MAX_MODEL_LEN, STUB_MODEL, StubEngine
from structlog.testing import capture_logs

from mstar.api_server.context.quota import Quotas
from mstar.ipc import messages as m
from mstar.settings import load_settings
from mstar.settings.keys_file import ApiKey, key_hash

MESSAGES = [{"role": "user", "content": "hi"}]


def _key(name: str, secret: str, extra: str = "") -> str:
    return f'[[keys]]\nname = "{name}"\nhash = "{key_hash(secret)}"\n{extra}\n'


KEYS = (_key("batch", "batch-secret", "requests_per_minute = 3\npriority = 'low'")
        + _key("tight", "tight-secret", "tokens_per_minute = 5")
        + _key("narrow", "narrow-secret", "models = ['other-model']")
        + _key("ops", "ops-secret", "scopes = ['admin']")
        + _key("app", "app-secret", "priority = 'high'"))


def _server(tokenizer, keys_path, **environ):
    """(TestClient, RunningSettings) of an API server with this keys file, on a stub engine."""
    from starlette.testclient import TestClient

    from mstar.api_server.app import build_app
    from mstar.api_server.context.admission import Admission
    from mstar.api_server.context.metrics import Metrics
    from mstar.api_server.context.running import RunningSettings
    from mstar.api_server.context.served import ServedModel

    loaded = load_settings(environ={"MSTAR_API_KEYS_FILE": str(keys_path), **environ})
    running = RunningSettings(loaded.settings, loaded)
    engine = StubEngine()
    app = build_app(engine, tokenizer, running, ServedModel(STUB_MODEL, STUB_MAX_MODEL_LEN,
                                                            running),
                    Admission(lambda: engine.failure), Metrics())
    return TestClient(app), running


@pytest.fixture
def keys_path(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text(KEYS)
    return path


def _chat(client, secret: str | None, **body):
    headers = {} if secret is None else {"Authorization": f"Bearer {secret}"}
    return client.post("/v1/chat/completions", headers=headers,
                       json={"messages": MESSAGES, "max_tokens": 2, **body})


def _metric(client, line: str) -> float:
    text = client.get("/metrics", headers={"Authorization": "Bearer ops-secret"}).text
    found = [row for row in text.splitlines() if row.startswith(line + " ")]
    return float(found[0].split()[-1]) if found else 0.0


def test_keys_and_scopes(tiny_tokenizer, keys_path):
    client, _ = _server(tiny_tokenizer, keys_path, MSTAR_API_KEY="root-secret")
    assert _chat(client, None).status_code == 401
    assert _chat(client, "nobody").status_code == 401
    assert _chat(client, "app-secret").status_code == 200
    assert client.get("/health").status_code == 200
    config = "/v1/config"
    refused = client.get(config, headers={"Authorization": "Bearer app-secret"})
    assert refused.status_code == 403 and "lacks the 'admin' scope" in refused.text
    assert client.get(config, headers={"Authorization": "Bearer ops-secret"}).status_code == 200
    assert _chat(client, "ops-secret").status_code == 403  # admin only: no inference
    # MSTAR_API_KEY stays a single admin key, with every scope and no limits
    assert client.get(config, headers={"x-api-key": "root-secret"}).status_code == 200
    assert _chat(client, "root-secret").status_code == 200


def test_over_the_request_limit_a_429_in_openais_shape(tiny_tokenizer, keys_path):
    client, _ = _server(tiny_tokenizer, keys_path)
    answers = [_chat(client, "batch-secret") for _ in range(5)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429, 429]
    assert answers[0].headers["x-ratelimit-limit-requests"] == "3"
    assert answers[0].headers["x-ratelimit-remaining-requests"] == "2"
    refused = answers[3]
    assert refused.json()["error"]["type"] == "requests"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert "requests per minute: limit 3" in refused.json()["error"]["message"]
    # one request comes back every 20 s: Retry-After says so, honestly
    assert 19 <= int(refused.headers["retry-after"]) <= 20
    assert 19000 <= int(refused.headers["retry-after-ms"]) <= 20000
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    reset = refused.headers["x-ratelimit-reset-requests"]  # full again in just under a minute
    assert reset.endswith("s") and 59.0 < float(reset[:-1]) < 60.0
    assert _chat(client, "app-secret").status_code == 200  # another key is not limited
    assert _metric(client, 'mstar_key_requests_total{key="batch",status="429"}') == 2
    assert _metric(client, 'mstar_key_requests_total{key="batch",status="200"}') == 3
    assert _metric(client, 'mstar_key_rate_limited_total{key="batch",limit="requests"}') == 2
    assert _metric(client, 'mstar_key_tokens_total{key="batch",kind="completion"}') == 6


def test_tokens_are_charged_as_they_stream(tiny_tokenizer, keys_path):
    client, _ = _server(tiny_tokenizer, keys_path)
    first = _chat(client, "tight-secret", stream=True)  # the prompt alone is over 5 tokens
    assert first.status_code == 200
    refused = _chat(client, "tight-secret")
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "tokens"
    assert int(refused.headers["retry-after"]) >= 1
    prompt = _metric(client, 'mstar_key_tokens_total{key="tight",kind="prompt"}')
    assert prompt > 5 and _metric(client, 'mstar_key_tokens_total{key="tight",kind="completion"}') == 2


def test_the_model_allow_list(tiny_tokenizer, keys_path):
    client, _ = _server(tiny_tokenizer, keys_path)
    refused = _chat(client, "narrow-secret", model=STUB_MODEL)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed"
    assert _chat(client, "narrow-secret").status_code == 403  # no model named: the served one
    assert _chat(client, "app-secret", model=STUB_MODEL).status_code == 200


def test_a_reload_applies_new_limits_to_the_next_request_and_a_bad_one_keeps_the_old(
        tiny_tokenizer, keys_path):
    from mstar.api_server.reload import reload_server_settings

    client, running = _server(tiny_tokenizer, keys_path)
    sent = []
    assert [_chat(client, "batch-secret").status_code for _ in range(2)] == [200, 200]
    keys_path.write_text(KEYS.replace("requests_per_minute = 3", "requests_per_minute = 1"))
    before = running.settings.fingerprint()
    reload_server_settings(running, lambda msg: sent.append(m.decode(m.encode(msg))))
    assert running.settings.fingerprint() != before
    assert sent and sent[0].values["api_keys_digest"] == running.keys.digest  # to the workers
    lowered = _chat(client, "batch-secret")
    assert lowered.status_code == 200 and lowered.headers["x-ratelimit-limit-requests"] == "1"
    assert _chat(client, "batch-secret").status_code == 429
    keys_path.write_text(KEYS + "[[keys]]\nname = 'broken'\n")
    with capture_logs() as logs:
        reload_server_settings(running, sent.append)
    rejected = [e for e in logs if e["event"] == "settings_reload_rejected"]
    assert rejected and f"{keys_path}:" in rejected[0]["reason"]
    assert "keys[5].hash: Field required" in rejected[0]["reason"]
    assert _chat(client, "app-secret").status_code == 200  # the old keys stay in force


def test_buckets_refill_at_their_rate_and_concurrency_is_counted():
    now = [1000.0]
    quotas = Quotas(clock=lambda: now[0])
    key = ApiKey(name="k", hash=key_hash("x"), requests_per_minute=2, max_concurrent=2)
    assert quotas.admit(key) is None and quotas.admit(key) is None
    refusal = quotas.admit(key)
    assert refusal.limit == "concurrency" and refusal.retry_after_s == 1.0
    quotas.release(key)
    quotas.release(key)
    refusal = quotas.admit(key)
    assert refusal.limit == "requests" and refusal.retry_after_s == pytest.approx(30.0)
    now[0] += 29.0
    assert quotas.admit(key).retry_after_s == pytest.approx(1.0)
    now[0] += 1.0
    assert quotas.admit(key) is None  # refilled: one every 30 s
    tokens = ApiKey(name="t", hash=key_hash("y"), tokens_per_minute=60)
    assert quotas.admit(tokens) is None
    quotas.charge(tokens, 90)  # the bucket goes 30 below zero: 31 s until one token is back
    refusal = quotas.admit(tokens)
    assert refusal.limit == "tokens" and refusal.retry_after_s == pytest.approx(31.0)
