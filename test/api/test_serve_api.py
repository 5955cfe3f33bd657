"""`mstar serve` end to end: real processes on 127.0.0.1, the openai client, a tiny random model.

The session's shared tiny-model API server (test/conftest.py: api_server) carries every knob
these tests need at once: an API key, a cap of one request in flight, a 1 MiB body limit, two
model-name aliases ("m", "tiny-llama"), and three problematic environment settings whose warnings
must be logged before the model loads.
"""

from __future__ import annotations

import json
import re
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from serve_helpers import AUTH, hard_timeout, wait_idle  # noqa: F401 (hard_timeout: autouse)


def test_setting_warnings_are_logged_before_the_model_loads(api_server, api_client):
    log = api_server.log()
    loading = log.index("model_loaded")
    for needle in ("MSTAR_LAUNCH_WAIT_MS", "MSTAR_MAX_CONSECUTIVE_SPEC_STEPS",
                   "did you mean MSTAR_LAUNCH_WAIT_MS"):
        assert needle in log, needle
        assert log.index(needle) < loading, f"{needle} logged after the model loaded"
    # ... and the server serves anyway.
    out = api_client.completions.create(model="tiny-llama", prompt="The quick", max_tokens=4)
    assert out.choices[0].finish_reason in ("stop", "length")


def test_chat_completion(api_server, api_client):
    models = api_client.models.list()
    name = models.data[0].id
    assert name == api_server.model_dir.name  # a local dir is served under its basename
    out = api_client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "Hello world!"}], max_tokens=6,
        temperature=0, n=2, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    assert [c.index for c in out.choices] == [0, 1]
    assert out.choices[0].message.content == out.choices[1].message.content  # greedy
    assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens > 0
    assert len(out.choices[0].logprobs.content) == 6
    assert len(out.choices[0].logprobs.content[0].top_logprobs) == 2


def test_streaming_matches_non_streaming(api_client):
    kwargs = dict(model="m", prompt="Paris is the capital of", max_tokens=8, temperature=0,
                  extra_body={"ignore_eos": True})
    whole = api_client.completions.create(**kwargs)
    chunks = list(api_client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].usage.completion_tokens == 8
    chat = list(api_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chat[0].choices[0].delta.role == "assistant"
    assert chat[-2].choices[0].finish_reason == "length"
    assert chat[-1].usage.completion_tokens == 5


def test_usage_reports_prompt_tokens_from_the_prefix_cache(api_client):
    prompt = "The quick brown fox jumps over the lazy dog. " * 4  # several full KV blocks
    kwargs = dict(model="m", prompt=prompt, max_tokens=2, temperature=0)
    first = api_client.completions.create(**kwargs)
    again = api_client.completions.create(**kwargs)
    assert first.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens
    assert again.usage.prompt_tokens_details.cached_tokens >= 16  # whole blocks reused


def test_generate_streams_ndjson(api_server):
    with httpx.stream("POST", api_server.url + "/generate", headers=AUTH, timeout=30,
                      json={"prompt": "Hello", "max_tokens": 5, "ignore_eos": True}) as resp:
        lines = [json.loads(line) for line in resp.iter_lines() if line]
    assert resp.status_code == 200
    assert sum(len(line["token_ids"]) for line in lines) == 5
    assert lines[-1]["finished"] and lines[-1]["finish_reason"] == "length"
    assert not any(line["finished"] for line in lines[:-1])


@pytest.mark.parametrize(("body", "param"), [
    (b'{"prompt": "hi", "max_tokens": ', None),
    (b'{"prompt": "hi", "temperature": "hot"}', "temperature"),
    (b'{"prompt": "hi", "top_p": 5}', "top_p"),
    (b'{"prompt": "hi", "n": 0}', "n"),
    (b'{"max_tokens": 4}', "prompt"),
    (b'{"prompt": "hi", "max_tokens": 100000}', "max_tokens"),
])
def test_bad_input_is_a_400_naming_the_field(api_server, body, param):
    resp = httpx.post(api_server.url + "/v1/completions", content=body, headers=AUTH, timeout=10)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    if param:
        assert param in error["message"]


def test_api_key_required_except_for_health(api_server):
    assert httpx.get(api_server.url + "/health").status_code == 200
    assert httpx.get(api_server.url + "/v1/models").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    resp = httpx.post(api_server.url + "/v1/completions", json={"prompt": "x"}, headers=wrong)
    assert resp.status_code == 401
    assert resp.json()["error"]["type"] == "authentication_error"


def test_body_over_the_limit_is_413(api_server):
    big = b'{"prompt": "' + b"a" * (2 * 1024 * 1024) + b'"}'
    resp = httpx.post(api_server.url + "/v1/completions", content=big, headers=AUTH, timeout=10)
    assert resp.status_code == 413

    def chunked():  # no Content-Length: the streamed size is checked too
        for _ in range(3):
            yield b"a" * (512 * 1024)

    resp = httpx.post(api_server.url + "/v1/completions", content=chunked(), headers=AUTH, timeout=10)
    assert resp.status_code == 413


def _hold_the_slot(api_server) -> socket.socket:
    """A request admitted whose body never finishes arriving: it holds the one slot until the
    socket closes, however fast the model (a stream of the tiny model may end first)."""
    url = urlsplit(api_server.url)
    body = b'{"prompt": "x"}'
    sock = socket.create_connection((url.hostname, url.port))
    head = "".join(f"{k}: {v}\r\n" for k, v in AUTH.items())
    sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}\r\n{head}"
                 f"Content-Type: application/json\r\nContent-Length: {len(body) + 8}\r\n\r\n"
                 .encode() + body)
    deadline = time.monotonic() + 30
    while api_server.metric("mstar_http_requests_in_flight", AUTH) < 1:
        assert time.monotonic() < deadline, "the held request was never admitted"
        time.sleep(0.02)
    return sock


def test_over_the_cap_is_an_immediate_503(api_server):
    held = _hold_the_slot(api_server)
    try:
        started = time.monotonic()
        resp = httpx.post(api_server.url + "/v1/completions", json={"prompt": "x"}, headers=AUTH)
        assert resp.status_code == 503
        assert "max_concurrent_requests" in resp.json()["error"]["message"]
        assert time.monotonic() - started < 1.0
        # health, models and metrics are not counted against the cap
        assert httpx.get(api_server.url + "/health").status_code == 200
        assert httpx.get(api_server.url + "/v1/models", headers=AUTH).status_code == 200
    finally:
        held.close()
        wait_idle(api_server)


def test_metrics_report_requests_tokens_and_latency(api_server, api_client):
    api_client.completions.create(model="m", prompt="Hello", max_tokens=3,
                              extra_body={"ignore_eos": True})
    text = httpx.get(api_server.url + "/metrics", headers=AUTH).text
    assert re.search(r'mstar_requests_total\{endpoint="/v1/completions",status="200"\} [1-9]', text)
    assert re.search(r'mstar_requests_total\{endpoint="/v1/completions",status="503"\}', text)
    for name in ("mstar_prompt_tokens_total", "mstar_generation_tokens_total",
                 "mstar_time_to_first_token_seconds_count",
                 "mstar_inter_token_latency_seconds_count"):
        assert api_server.metric(name, AUTH) > 0, name
    assert "mstar_num_requests_waiting" in text


def test_sampling_knobs_are_honoured(api_client):
    kwargs = dict(model="m", prompt="The quick brown", max_tokens=8, temperature=1.0, top_p=0.9,
                  seed=7, extra_body={"top_k": 20, "min_p": 0.01, "repetition_penalty": 1.1,
                                      "ignore_eos": True})
    first = api_client.completions.create(**kwargs).choices[0].text
    assert api_client.completions.create(**kwargs).choices[0].text == first  # seeded: reproducible
    stopped = api_client.completions.create(model="m", prompt="The quick brown", max_tokens=8,
                                        temperature=0, stop=[first[:1] or "x"],
                                        extra_body={"ignore_eos": True})
    assert stopped.choices[0].finish_reason in ("stop", "length")
