"""Takes the screenshots docs/serving.rst shows: the playground after one reply, and the operator's
page after a few scrapes, in headless Chromium (Debian's chromium, driven by Playwright, as the
browser tests do).

    .venv/bin/python scripts/screenshots.py                 # starts `mstar serve` (built-in model)
    .venv/bin/python scripts/screenshots.py --url http://127.0.0.1:8000   # a running server

Writes docs/_static/playground.png, operator.png and operator_settings.png (the page's settings
part), as palette PNGs to stay small.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from PIL import Image
from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parents[1] / "docs" / "_static"
VIEWPORT = {"width": 1200, "height": 760}
QUESTION = "What is the capital of France? Answer in two sentences."
SCRAPES = 8  # of the operator's page (one every 2 s) before its screenshot


@contextlib.contextmanager
def served(url: str | None) -> Iterator[str]:
    """``url``, or a `mstar serve` of the built-in model started for the screenshots."""
    if url:
        yield url
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MSTAR_PORT": str(port), "MSTAR_MAX_MODEL_LEN": "2048"}
    proc = subprocess.Popen([sys.executable, "-m", "mstar", "serve"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _ready(url):
            if proc.poll() is not None:
                raise SystemExit(f"mstar serve exited with {proc.returncode}")
            time.sleep(0.5)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def some_requests(url: str, count: int = 3) -> None:
    for i in range(count):
        httpx.post(url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": f"Count from {i} to {i + 20}."}],
            "max_tokens": 24})


def save(page, name: str) -> None:
    """The page's screenshot as a 256-colour PNG (a fraction of the size of a full-colour one)."""
    image = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    path = OUT / name
    image.quantize(colors=256).save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def take(url: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(url + "/")
        page.wait_for_selector("#model option", state="attached")
        page.fill("#system", "You are a helpful assistant.")
        page.fill("#temperature", "0")
        page.fill("#max-tokens", "48")
        page.fill("#prompt", QUESTION)
        page.click("#send")
        page.wait_for_selector(".message.assistant:not(.streaming) .meta:has-text('tok/s')",
                               timeout=120_000)
        page.click("#copy-curl")
        save(page, "playground.png")
        page.goto(url + "/operator")
        page.locator("#knob-MSTAR_MAX_NUM_SEQS").wait_for()
        load = threading.Thread(target=some_requests, args=(url,))
        load.start()  # something for the plots to show
        page.wait_for_timeout(2_000 * SCRAPES)
        load.join()
        save(page, "operator.png")
        page.evaluate("document.getElementById('settings').parentElement.scrollIntoView()")
        save(page, "operator_settings.png")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one)")
    args = parser.parse_args()
    with served(args.url) as url:
        take(url)


if __name__ == "__main__":
    main()
