"""Headless Chromium for the tests of the browser pages: Debian's ``chromium`` driven by
Playwright's Python API (no browser download; scripts/setup.sh installs the package).

Import ``chromium_browser`` (the module-scoped fixture ``browser``) into a test module to use it,
and mark the module with ``needs_chromium``. ``open_tab`` opens a page and records what its console
reports as errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1200, "height": 800}

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"needs Debian's chromium at {CHROMIUM} (scripts/setup.sh "
    "installs it: apt-get install chromium)")


def launch(playwright):
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])


@pytest.fixture(scope="module", name="browser")
def chromium_browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@dataclass
class Tab:
    page: object
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions


def open_tab(browser, url: str, before=None) -> Tab:
    """A new tab (its own sessionStorage) at ``url``, recording console errors. ``before(page)``
    runs before the page loads (to watch its first requests)."""
    page = browser.new_context(viewport=VIEWPORT).new_page()
    tab = Tab(page)
    page.on("console", lambda message: message.type == "error" and tab.errors.append(message.text))
    page.on("pageerror", lambda error: tab.errors.append(f"uncaught: {error}"))
    if before is not None:
        before(page)
    page.goto(url)
    return tab
