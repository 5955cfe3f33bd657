"""Chat logprobs cover the content and not the stop token (issue 39): through the official openai
client, streamed and not, on the shared tiny-Llama server (``api_server``). ``logit_bias`` drives
the model to its end-of-sequence token once ``min_tokens`` allow it, so the output ends on a stop
token; joining the entries' ``bytes`` gives the content (docs/openai_api.rst), and usage still
counts the stop token."""

from __future__ import annotations

import pytest
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

TOKENS = 3  # the content's; the stop token comes after them


@pytest.fixture
def ends_on_eos(tiny_tokenizer) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
            "temperature": 0, "logprobs": True, "top_logprobs": 1,
            "logit_bias": {str(tiny_tokenizer.eos_token_id): 100},
            "extra_body": {"min_tokens": TOKENS}}


def _joined(entries) -> str:
    """The entries' bytes as text; the random model may pick a lone continuation byte, which the
    content (whole characters only) leaves out, so undecodable bytes are left out here too."""
    return bytes(b for entry in entries for b in entry.bytes).decode(errors="ignore")


def test_chat_logprobs_end_before_the_stop_token(api_client, ends_on_eos):
    out = api_client.chat.completions.create(**ends_on_eos)
    choice = out.choices[0]
    assert choice.finish_reason == "stop"
    entries = choice.logprobs.content
    assert len(entries) == TOKENS and "<|im_end|>" not in [e.token for e in entries]
    assert _joined(entries) == choice.message.content
    assert out.usage.completion_tokens == TOKENS + 1  # the stop token stays in usage


def test_streamed_chat_logprobs_end_before_the_stop_token(api_client, ends_on_eos):
    chunks = list(api_client.chat.completions.create(**ends_on_eos, stream=True))
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content or []]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert len(entries) == TOKENS and _joined(entries) == content
