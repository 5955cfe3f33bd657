"""`mstar serve org/name` with Hugging Face ids: from a hub cache the test builds in
huggingface_hub's own layout (offline), and downloaded from a small hub on loopback (HF_ENDPOINT)
so that the download path itself runs; only the files serving needs are fetched. An id neither
cached nor reachable exits 2 naming the id and the cache; `mstar config validate --model org/name`
fetches the config alone."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from hub_server import COMMIT, HubServer
from serve_helpers import free_port, hard_timeout, running_server  # noqa: F401 (autouse)

NOT_SERVING = {"pytorch_model.bin": b"legacy weights", "README.md": b"# tiny",
               "onnx/model.onnx": b"onnx"}


def build_hub_cache(home: Path, repo: str, model_dir: Path) -> Path:
    """huggingface_hub's cache layout under ``home``/hub: blobs by hash, a snapshot of links to
    them, and refs/main naming the commit."""
    root = home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / COMMIT
    for path in sorted(model_dir.iterdir()):
        data = path.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot / path.name).symlink_to(os.path.relpath(blob, snapshot))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    return root


def _env(home: Path, offline: bool, endpoint: str | None = None) -> dict[str, str]:
    env = {"HF_HOME": str(home), "HF_HUB_OFFLINE": "1" if offline else "0"}
    return {**env, **({"HF_ENDPOINT": endpoint} if endpoint else {})}


def _mstar(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MSTAR_", "HF_"))}
    full.update({"MSTAR_PORT": str(free_port()), **env})
    return subprocess.run([sys.executable, "-m", "mstar", *args], env=full, timeout=timeout,
                          capture_output=True, text=True)


def _chat(server, model: str) -> None:
    resp = httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert resp.status_code == 200, resp.text
    assert httpx.get(server.url + "/v1/models", timeout=5).json()["data"][0]["id"] == model


@pytest.fixture(scope="module")
def cached_home(tmp_path_factory, tiny_model_dir) -> Path:
    home = tmp_path_factory.mktemp("hf-home")
    build_hub_cache(home, "org/cached", tiny_model_dir("llama"))
    return home


def test_a_cached_id_is_served_offline(cached_home, tmp_path):
    for server in running_server(Path("org/cached"), tmp_path / "s.log",
                                 _env(cached_home, offline=True)):
        _chat(server, "org/cached")


def test_an_id_neither_cached_nor_reachable_exits_2_naming_it(cached_home):
    offline = _mstar(["serve", "org/missing"], _env(cached_home, offline=True))
    assert offline.returncode == 2, offline.stdout + offline.stderr
    said = offline.stdout + offline.stderr
    assert "org/missing" in said and str(cached_home / "hub") in said
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    unreachable = _mstar(["serve", "org/missing@v2"], _env(cached_home, False, closed))
    assert unreachable.returncode == 2 and "org/missing@v2" in unreachable.stdout + \
        unreachable.stderr


def test_config_validate_reads_a_hub_ids_config(cached_home):
    usable = _mstar(["config", "validate", "--model", "org/cached"], _env(cached_home, True))
    assert usable.returncode == 0 and "configuration is usable" in usable.stdout, usable.stderr
    missing = _mstar(["config", "validate", "--model", "org/missing"], _env(cached_home, True))
    assert missing.returncode == 2 and "org/missing" in missing.stderr


def test_an_id_is_downloaded_from_the_hub_with_only_what_serving_needs(tiny_model_dir, tmp_path):
    home = tmp_path / "hf"
    with HubServer.of_dir("org/tiny", tiny_model_dir("llama"), NOT_SERVING) as hub:
        for server in running_server(Path("org/tiny@main"), tmp_path / "s.log",
                                     _env(home, offline=False, endpoint=hub.url)):
            _chat(server, "org/tiny")
            assert "Fetching" in server.log()  # huggingface_hub's progress bar
        fetched = set(hub.requested)
    assert fetched and not fetched & set(NOT_SERVING), fetched
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= fetched
    snapshot = home / "hub" / "models--org--tiny" / "snapshots" / COMMIT
    assert (snapshot / "config.json").is_file() and not (snapshot / "README.md").exists()
    assert len(hub.requested) == len(fetched)  # each once: the workers read the cache


def test_config_validate_downloads_the_config_alone_with_hf_token(tiny_model_dir, tmp_path):
    # both names set: the settings' value (MSTAR_HF_TOKEN wins) is what the hub sees
    env = {**_env(tmp_path / "hf", offline=False), "HF_TOKEN": "hf_env",
           "MSTAR_HF_TOKEN": "hf_test"}
    with HubServer.of_dir("org/tiny", tiny_model_dir("llama"), NOT_SERVING) as hub:
        done = _mstar(["config", "validate", "--model", "org/tiny"],
                      {**env, "HF_ENDPOINT": hub.url})
    assert done.returncode == 0, done.stdout + done.stderr
    assert hub.requested == ["config.json"]
    of_repo = {auth for path, auth in hub.authorizations if "org/tiny" in path}
    assert of_repo == {"Bearer hf_test"}
