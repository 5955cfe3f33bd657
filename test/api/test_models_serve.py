"""Several models in one `mstar serve` (MSTAR_MODELS, docs/models_many.rst), on one server of three
tiny random models: a (Llama), b (Qwen3, alias ``bee`` from its env file) and c (the Llama again,
whose env file bounds its load wait to 50 ms), under a budget that holds any two of them.

The tests run in file order and share the server's state: each says what it expects to find."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_helpers import running_server

from mstar.api_server.model_group import weights_mb
from mstar.settings.keys_file import key_hash

ADMIN, USER = "models-admin-key", "models-user-key"
ADMIN_AUTH, USER_AUTH = ({"Authorization": f"Bearer {k}"} for k in (ADMIN, USER))
PROMPT = "Paris is the capital of France, and Berlin"
MAX_NEW = 8
ORIGIN = "https://app.example"


@pytest.fixture(scope="module")
def dirs(tiny_model_dir):
    return {"a": tiny_model_dir("llama"), "b": tiny_model_dir("qwen3"), "c": tiny_model_dir("llama")}


@pytest.fixture(scope="module")
def server(dirs, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "env").mkdir()
    (root / "env" / "b.env").write_text("MSTAR_SERVED_MODEL_NAMES=bee\n")
    (root / "env" / "c.env").write_text("MSTAR_MODELS_LOAD_WAIT_S=0.05\n")
    (root / "keys.toml").write_text(f'[[keys]]\nname = "user"\nhash = "{key_hash(USER)}"\n'
                                    'scopes = ["inference"]\n')
    sizes = [weights_mb(dirs[n]) for n in ("a", "b")]
    budget = max(sum(sizes), 2 * sizes[0]) + min(sizes) / 2  # any two models, never three
    yield from running_server(dirs["a"], root / "s.log", {
        "MSTAR_MODELS": ",".join(f"{n}={d}" for n, d in dirs.items()),
        "MSTAR_MODELS_ENV_DIR": str(root / "env"), "MSTAR_MODELS_KEEP_ALIVE_S": "-1",
        "MSTAR_MODELS_MEMORY_BUDGET_MB": f"{budget:.3f}", "MSTAR_API_KEY": ADMIN,
        "MSTAR_API_KEYS_FILE": str(root / "keys.toml"), "MSTAR_DTYPE": "float32",
        "MSTAR_MODELS_LOAD_WAIT_S": "240", "MSTAR_CORS_ORIGINS": ORIGIN})  # a loaded machine loads slowly


@pytest.fixture(scope="module")
def reference(dirs, tiny_tokenizer, greedy_reference):
    """Each model's greedy text for PROMPT, from transformers."""
    ids = tiny_tokenizer.encode(PROMPT)

    def text(name: str) -> str:
        [tokens] = greedy_reference(dirs[name], [ids], MAX_NEW)
        return tiny_tokenizer.decode(tokens).rstrip("\ufffd")

    return text


def _complete(server, model: str, **extra) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", headers=USER_AUTH, timeout=120, json={
        "model": model, "prompt": PROMPT, "max_tokens": MAX_NEW, "temperature": 0, **extra})


def _text(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text
    return resp.json()["choices"][0]["text"].rstrip("\ufffd")


def _states(server) -> dict[str, str]:
    data = httpx.get(server.url + "/v1/models", headers=USER_AUTH, timeout=10).json()["data"]
    return {card["id"]: card["state"] for card in data}


def _gauge(server, name: str, model: str) -> float:
    text = httpx.get(server.url + "/metrics", headers=USER_AUTH, timeout=10).text
    return float(re.search(rf'^{name}{{model="{model}"}} (\S+)$', text, re.M).group(1))


def _wait_state(server, model: str, state: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _states(server)[model] != state:
        assert time.monotonic() < deadline, f"{model} never {state}: {_states(server)}"
        time.sleep(0.1)


def test_every_model_is_listed_unloaded_before_its_first_request(server):
    assert _states(server) == {"a": "unloaded", "b": "unloaded", "c": "unloaded"}
    assert _gauge(server, "mstar_model_loaded", "a") == 0


def test_a_cors_preflight_is_answered_without_a_key_and_loads_no_model(server):
    resp = httpx.options(server.url + "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert resp.status_code == 200
    assert resp.headers["access-control-allow-origin"] == ORIGIN
    assert set(_states(server).values()) == {"unloaded"}


def test_an_unknown_model_is_404_model_not_found(server):
    resp = _complete(server, "nosuch")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"


def test_requests_wait_for_the_lazy_load_and_each_goes_to_its_model(server, reference):
    with ThreadPoolExecutor(4) as pool:  # all arrive while a loads: none is lost
        texts = [_text(r) for r in pool.map(lambda _: _complete(server, "a"), range(4))]
    assert texts == [reference("a")] * 4
    assert _text(_complete(server, "bee")) == reference("b")  # b's alias, from its env file
    assert reference("a") != reference("b")
    assert _states(server) == {"a": "loaded", "b": "loaded", "c": "unloaded"}
    assert _gauge(server, "mstar_model_memory_mb", "a") > 0


def test_the_bounded_wait_is_a_503_with_retry_after_and_the_lru_idle_model_is_evicted(
        server, reference):
    resp = _complete(server, "c")  # c's load wait is 50 ms: it cannot load that fast
    assert resp.status_code == 503 and int(resp.headers["retry-after"]) >= 1
    _wait_state(server, "c", "loaded")
    assert _text(_complete(server, "c")) == reference("a")  # the same weights as a
    # the budget holds two: a (used before b) made room
    assert _states(server) == {"a": "unloaded", "b": "loaded", "c": "loaded"}
    assert _gauge(server, "mstar_model_memory_mb", "a") == 0


def test_a_request_in_flight_finishes_across_an_admin_unload(server):
    done = {}

    def run() -> None:  # 32 choices of 480 tokens: it runs for a while
        done["resp"] = _complete(server, "b", n=32, max_tokens=480, ignore_eos=True)

    def unload() -> None:
        done["unload"] = httpx.post(server.url + "/v1/admin/models/b/unload", headers=ADMIN_AUTH,
                                    timeout=120)

    request = threading.Thread(target=run)
    request.start()
    while _gauge(server, "mstar_model_requests_in_flight", "b") < 1:
        time.sleep(0.01)
    unloading = threading.Thread(target=unload)
    unloading.start()
    seen = set()
    while request.is_alive():
        seen.add(_states(server)["b"])
    request.join()
    unloading.join(120)
    assert "unloading" in seen  # the unload waited for the request...
    choices = done["resp"].json()["choices"]  # ...which finished whole
    assert done["resp"].status_code == 200 and len(choices) == 32
    assert {c["finish_reason"] for c in choices} == {"length"}
    assert done["unload"].json()["state"] == "unloaded"


def test_admin_load_and_unload_need_the_admin_scope(server):
    for action in ("load", "unload"):
        resp = httpx.post(server.url + f"/v1/admin/models/a/{action}", headers=USER_AUTH)
        assert resp.status_code == 403
    resp = httpx.post(server.url + "/v1/admin/models/a/load", headers=ADMIN_AUTH, timeout=120)
    assert resp.status_code == 200 and resp.json()["state"] == "loaded"
    resp = httpx.post(server.url + "/v1/admin/models/a/unload", headers=ADMIN_AUTH, timeout=60)
    assert resp.status_code == 200 and resp.json()["state"] == "unloaded"
    resp = httpx.post(server.url + "/v1/admin/models/nosuch/load", headers=ADMIN_AUTH)
    assert resp.status_code == 404


def test_an_idle_model_unloads_after_its_keep_alive_and_a_request_loads_it_again(
        server, reference):
    assert _text(_complete(server, "a", keep_alive="1s")) == reference("a")
    _wait_state(server, "a", "unloaded", 20)
    assert _gauge(server, "mstar_model_memory_mb", "a") == 0  # its memory freed
    assert _text(_complete(server, "a", keep_alive=-1)) == reference("a")
    resp = _complete(server, "a", keep_alive="soon")
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "keep_alive"


def test_config_shows_each_models_settings_and_fingerprint(server):
    resp = httpx.get(server.url + "/v1/config", headers=USER_AUTH)
    assert resp.status_code == 403  # the admin scope's
    shown = httpx.get(server.url + "/v1/config", headers=ADMIN_AUTH).json()
    models = shown["models"]
    assert list(models) == ["a", "b", "c"]
    b = {r["name"]: r for r in models["b"]["settings"]}
    assert b["MSTAR_SERVED_MODEL_NAMES"]["value"] == "bee"
    assert b["MSTAR_SERVED_MODEL_NAMES"]["source"].endswith("b.env:1")
    assert models["b"]["fingerprint"] != models["a"]["fingerprint"]
