"""The browser pages as HTTP sees them, on the in-process stub app: they load without the API key
(with a strict Content-Security-Policy) while every API call needs it, they are not counted as
requests, MSTAR_PLAYGROUND=off serves none of them, and no page script can write HTML."""

from __future__ import annotations

import re

import pytest
from api_stub import stub_app

from mstar.api_server.ui.pages import ASSET_PREFIX, PAGES, STATIC, page_files

KEY = "k-123"
API_PATHS = ("/v1/models", "/v1/config", "/metrics")
# The DOM's ways to parse a string as HTML or code: none of them may appear in a page's script.
HTML_SINKS = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|"
                        r"new Function|DOMParser|createContextualFragment")


@pytest.fixture()
def client(tiny_tokenizer):
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer, api_key=KEY)
    return TestClient(app)


def test_the_pages_load_without_the_key_and_no_api_call_succeeds_without_it(client):
    for url in page_files():
        response = client.get(url)
        assert response.status_code == 200, url
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
    assert client.get("/").text.startswith("<!DOCTYPE html>")
    assert client.head("/operator").content == b""
    for path in API_PATHS:
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert client.post("/", json={}).status_code == 401  # only GET and HEAD reach the pages
    assert client.get("/ui/../app.py").status_code == 401  # nothing outside the listed files


def test_page_loads_are_not_counted_as_requests(client):
    for _ in range(3):
        client.get("/")
    metrics = client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert "mstar_requests_total{" not in metrics


def test_the_knob_turns_the_pages_off(tiny_tokenizer):
    from starlette.testclient import TestClient

    app, _ = stub_app(tiny_tokenizer, playground=False)
    client = TestClient(app)
    assert client.get("/").status_code == 404
    assert client.get(ASSET_PREFIX + "common.js").status_code == 404
    assert client.get("/v1/models").status_code == 200


def test_every_script_a_page_names_is_served():
    files = page_files()
    for page in PAGES.values():
        named = re.findall(r'(?:src|href)="(/ui/[^"]+)"', (STATIC / page).read_text())
        assert named and all(url in files for url in named), page


def test_no_page_script_writes_html():
    scripts = sorted(STATIC.glob("*.js"))
    assert len(scripts) >= 5, "the scan found no scripts"
    offenders = [f"{p.name}: {m.group()}" for p in scripts for m in HTML_SINKS.finditer(p.read_text())]
    assert offenders == []


def test_the_sink_scan_catches_a_planted_innerhtml():
    assert HTML_SINKS.search('node.innerHTML = chunk;')
    assert HTML_SINKS.search('node.insertAdjacentHTML("beforeend", chunk)')
    assert not HTML_SINKS.search("node.textContent = chunk;")
