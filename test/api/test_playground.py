"""The issue's "done when" for the browser pages, in a real headless Chromium against `mstar serve`
on the built-in model (the session's shared server): the playground streams a reply, sends the
temperature the user set, renders a reply that contains ``<script>`` as text, and copies the
request as curl and as Python; an image attachment is sent as an image_url part; the operator's
page shows MSTAR_MAX_NUM_SEQS with its source, a knob waiting for a restart, the fingerprint,
health and the plots. Each page is screenshotted (into tmp_path) and must log no console error.
"""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from browser import chromium_browser, needs_chromium, open_tab  # noqa: F401 - the fixture browser
from serve_helpers import hard_timeout  # noqa: F401 - autouse: a hung browser fails, not stalls

pytestmark = needs_chromium
pytest.importorskip("playwright.sync_api", reason="needs the playwright package")

CHAT = "/v1/chat/completions"
# SmolLM2-135M-Instruct's greedy answer names the tag: "The HTML tag `<script>` is used to ..."
MARKUP_QUESTION = "What does the HTML tag <script> do?"
LAST_REPLY = ".message.assistant >> nth=-1"
# Records, on each change of the transcript, the length of the streaming reply's text: more than
# one length while it streams means the text arrived piece by piece.
WATCH_STREAM = """() => {
  window.streamedLengths = [];
  new MutationObserver(() => {
    const node = document.querySelector('.message.assistant.streaming .text');
    if (node && node.textContent) window.streamedLengths.push(node.textContent.length);
  }).observe(document.getElementById('messages'), {childList: true, subtree: true, characterData: true});
}"""

# Ten observations between two scrapes (four before them): five up to 0.1 s, five in (0.1 s, 1 s].
QUANTILES_OF_TEN = """() => {
  const scrape = (a, b) => ({time: 0, samples: parseMetrics(
    `h_bucket{le="0.1"} ${a}\nh_bucket{le="1"} ${b}\nh_bucket{le="+Inf"} ${b}\n`)});
  return [0.5, 0.9, 1].map((q) => quantileBetween(scrape(3, 4), scrape(8, 14), "h", q));
}"""


def ask(page, question: str) -> None:
    """Sends a question and waits until its reply has finished."""
    replies = page.locator(".message.assistant").count()
    page.fill("#prompt", question)
    page.click("#send")
    page.wait_for_function(f"() => document.querySelectorAll('.message.assistant').length > {replies} && "
                           "!document.querySelector('.message.assistant.streaming')", timeout=30_000)


def test_chat_streams_carries_the_temperature_and_shows_markup_as_text(builtin_server, browser,
                                                                       tmp_path):
    tab = open_tab(browser, builtin_server.url + "/")
    page = tab.page
    bodies = []
    page.on("request", lambda r: r.url.endswith(CHAT) and bodies.append(r.post_data_json))
    page.wait_for_selector("#model option", state="attached")
    assert page.locator("#model").input_value() == "SmolLM2-135M-Instruct"
    assert page.locator("#image-input").is_hidden()  # a text-only model: no image attachments
    page.fill("#max-tokens", "12")
    page.evaluate(WATCH_STREAM)

    ask(page, "Write one sentence about the sea.")
    reply = page.locator(LAST_REPLY)
    assert reply.locator(".text").text_content().strip()
    assert len(set(page.evaluate("window.streamedLengths"))) > 1, "the reply did not stream"
    meta = reply.locator(".meta").text_content()
    assert "TTFT" in meta and "tok/s" in meta, meta
    assert bodies[0]["temperature"] == 0.7 and bodies[0]["stream"] is True

    page.fill("#temperature", "0")
    page.fill("#max-tokens", "10")
    ask(page, MARKUP_QUESTION)
    assert bodies[1]["temperature"] == 0 and bodies[1]["max_tokens"] == 10
    reply = page.locator(LAST_REPLY)
    assert "<script>" in reply.locator(".text").text_content()  # the markup, shown as text
    assert "&lt;script&gt;" in reply.locator(".text").inner_html()
    assert page.locator("#messages script").count() == 0
    assert MARKUP_QUESTION in page.locator(".message.user >> nth=-1").text_content()
    page.screenshot(path=tmp_path / "playground.png", full_page=True)

    page.fill("#prompt", "And in one word?")
    page.click("#copy-python")
    python = page.locator("#snippet").text_content()
    compile(python, "snippet.py", "exec")  # valid Python
    assert "temperature=0," in python and '"content": "And in one word?"' in python
    page.click("#copy-curl")
    assert page.locator("#snippet").text_content().startswith(f"curl {builtin_server.url}{CHAT}")
    assert tab.errors == []


def with_a_pending_restart(route) -> None:
    """The server's real /v1/config, with MSTAR_MAX_MODEL_LEN waiting for a restart (as after a
    SIGHUP that read a new value: test_config_reload covers the server's side)."""
    config = route.fetch().json()
    for record in config["settings"]:
        if record["name"] == "MSTAR_MAX_MODEL_LEN":
            record["pending_restart"] = {"value": 4096, "source": "env file prod.env"}
    route.fulfill(json=config)


def test_operator_page_shows_settings_with_sources_health_and_plots(builtin_server, browser,
                                                                    tmp_path):
    config = httpx.get(builtin_server.url + "/v1/config", timeout=10).json()
    records = {r["name"]: r for r in config["settings"]}
    tab = open_tab(browser, builtin_server.url + "/operator",
                   before=lambda page: page.route("**/v1/config", with_a_pending_restart))
    page = tab.page
    row = page.locator("#knob-MSTAR_MAX_NUM_SEQS")
    row.wait_for()
    assert row.locator(".source").text_content() == records["MSTAR_MAX_NUM_SEQS"]["source"]
    assert row.locator(".value").text_content().startswith(str(records["MSTAR_MAX_NUM_SEQS"]["value"]))
    # the shared server sets MSTAR_NUM_KV_BLOCKS in its environment
    assert page.locator("#knob-MSTAR_NUM_KV_BLOCKS .source").text_content() == "environment"
    assert page.locator("#fingerprint").text_content() == config["fingerprint"]
    page.wait_for_function("() => document.getElementById('health').textContent === 'ok'")
    # a rate needs two scrapes: then the throughput plot has a line
    page.wait_for_function("() => document.querySelector('#plot-throughput path')"
                           ".getAttribute('d').includes('L')", timeout=10_000)
    pending = page.locator("#knob-MSTAR_MAX_MODEL_LEN .badge.pending")
    assert pending.text_content() == "restart pending: 4096"
    assert page.locator("#pending").text_content().startswith("1 change")
    # the plots' percentiles interpolate within a bucket as Prometheus' histogram_quantile does
    assert page.evaluate(QUANTILES_OF_TEN) == pytest.approx([0.1, 0.82, 1.0])
    page.fill("#filter", "MAX_NUM_SEQS")
    assert page.locator("#settings tr[id^=knob-]").count() == 1
    page.screenshot(path=tmp_path / "operator.png", full_page=True)
    assert tab.errors == []


def with_images(route) -> None:
    """The server's real /v1/models, with the model taking images too (the built-in one does not)."""
    models = route.fetch().json()
    for card in models["data"]:
        card["modalities"] = ["text", "image"]
    route.fulfill(json=models)


def test_an_image_attachment_goes_as_an_image_url_part(builtin_server, browser):
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(png, format="PNG")
    tab = open_tab(browser, builtin_server.url + "/",
                   before=lambda page: page.route("**/v1/models", with_images))
    page = tab.page
    bodies = []
    page.on("request", lambda r: r.url.endswith(CHAT) and bodies.append(r.post_data_json))
    page.wait_for_selector("#image-input", state="visible")
    assert page.locator("#audio-input").is_hidden()
    page.set_input_files("#image", files=[{"name": "red.png", "mimeType": "image/png",
                                           "buffer": png.getvalue()}])
    page.wait_for_selector("#attachments img.thumb")
    ask(page, "What colour is this?")
    text, image = bodies[0]["messages"][-1]["content"]
    assert text == {"type": "text", "text": "What colour is this?"}
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(
        png.getvalue()).decode()
    # The server's answer for a text-only model: a 400 naming the part, shown on the reply.
    assert "400" in page.locator(".message.assistant.error .meta").text_content()
    assert page.locator("#attachments img").count() == 0  # sent: the attachments are cleared
    assert all("400" in error for error in tab.errors), tab.errors
