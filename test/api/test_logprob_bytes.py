"""Logprobs carry each token's exact bytes: on the built-in model (fp32), a completion with emoji
and CJK characters, some of them split over several tokens, is rebuilt byte for byte (the
session's shared built-in server)."""

from __future__ import annotations

import codecs

import httpx

PROMPT = "你好世界 😀 你好世界 😀 你好世界 😀 你好世界"


def _post(server, path, body):
    r = httpx.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def _bytes_of(shown: str) -> bytes:
    """A completions token back to its bytes: ``bytes:\\xHH...`` or its text."""
    if shown.startswith("bytes:"):
        return bytes(int(h, 16) for h in shown.removeprefix("bytes:").split("\\x")[1:])
    return shown.encode()


def _whole_characters(data: bytes) -> str:
    """The text of these bytes, without a last character that max_tokens cut short (the text
    holds only whole characters)."""
    return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)


def test_chosen_tokens_bytes_rebuild_the_text(builtin_server):
    server = builtin_server
    choice = _post(server, "/v1/completions", {"prompt": PROMPT, "max_tokens": 16,
                                               "min_tokens": 16, "temperature": 0, "logprobs": 3})
    text, lp = choice["text"], choice["logprobs"]
    assert any(ord(c) > 0x2E80 for c in text)  # CJK or emoji in the output
    shown = lp["tokens"]
    assert any(t.startswith("bytes:\\x") for t in shown) and "\ufffd" not in "".join(shown)
    assert _whole_characters(b"".join(map(_bytes_of, shown))) == text
    assert all(len(top) == 3 for top in lp["top_logprobs"])  # no entry lost to a key collision
    chat = _post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 16, "min_tokens": 16,
        "temperature": 0, "logprobs": True, "top_logprobs": 2})
    content = chat["logprobs"]["content"]
    joined = bytes(b for t in content for b in t["bytes"])
    assert _whole_characters(joined) == chat["message"]["content"]
