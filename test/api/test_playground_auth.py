"""With MSTAR_API_KEY set, the playground asks for the key, and no API call it makes succeeds
without it; the key, once entered, is kept for the tab (sessionStorage) and sent with every call.
In headless Chromium against the shared tiny-model API server, which has a key."""

from __future__ import annotations

import pytest
from browser import chromium_browser, needs_chromium, open_tab  # noqa: F401 - the fixture browser
from serve_helpers import API_KEY, hard_timeout  # noqa: F401 - autouse: a hung browser fails

pytestmark = needs_chromium
pytest.importorskip("playwright.sync_api", reason="needs the playwright package")

API_PREFIXES = ("/v1/", "/metrics", "/tokenize", "/generate")


def _api_calls(page, calls: list) -> None:
    """Records (path, status, Authorization header) of every API call the page makes."""
    def seen(response):
        path = "/" + response.url.split("/", 3)[3]
        if path.startswith(API_PREFIXES):
            calls.append((path, response.status, response.request.headers.get("authorization")))
    page.on("response", seen)


def _enter_key(page, key: str) -> None:
    page.fill("#key-input", key)
    page.click("#key-form button[type=submit]")


def test_the_page_asks_for_the_key_and_nothing_succeeds_without_it(api_server, browser, tmp_path):
    calls = []
    tab = open_tab(browser, api_server.url + "/", before=lambda page: _api_calls(page, calls))
    page = tab.page
    page.wait_for_selector("#key-form", state="visible")
    page.screenshot(path=tmp_path / "key.png")
    assert page.locator("#model option").count() == 0
    _enter_key(page, "wrong-key")
    page.wait_for_function("() => !document.getElementById('key-form').hidden")
    page.wait_for_timeout(300)
    assert calls and all(status == 401 for _, status, _ in calls), calls

    before = len(calls)
    _enter_key(page, API_KEY)
    page.wait_for_selector("#model option", state="attached")
    assert page.locator("#key-form").is_hidden()
    page.fill("#max-tokens", "3")
    page.fill("#prompt", "hello")
    page.click("#send")
    page.wait_for_selector(".message.assistant .meta:has-text('tokens')")
    assert not page.locator(".message.assistant.error").count()
    after = calls[before:]
    assert ("/v1/chat/completions", 200, f"Bearer {API_KEY}") in after
    assert all(status == 200 and auth == f"Bearer {API_KEY}" for _, status, auth in after), after

    page.goto(api_server.url + "/operator")  # the same tab: the key is still there
    page.locator("#knob-MSTAR_API_KEY").wait_for()
    assert page.locator("#key-form").is_hidden()
    assert API_KEY not in page.locator("#settings").text_content()  # shown masked
    # The only console errors: Chromium's own line for each refused (401) call.
    assert all("401" in error for error in tab.errors), tab.errors
