"""Special-token text typed inside a chat message never becomes a special token.

A tokenizer turns the text ``<|im_start|>`` into its special token wherever it appears, so a user
(or a tool's result) who types it could open a turn of their own, e.g. a system turn. What a
message's content holds is therefore tokenized as plain text, as MSTAR_SPECIAL_TOKENS_IN_CONTENT
chooses:

- ``escape`` (the default): the chat template is rendered with each such content replaced by a
  marker; the rendered text is cut at the markers, the template's pieces are tokenized as usual
  (its special tokens stay special) and each content is tokenized with special tokens split, as
  the characters they are. Contents free of special text, the usual case, are left in the
  template: their tokens are exactly the plain rendering's.
- ``reject``: a 400 naming the message's content.

The special texts are the tokenizer's added tokens marked special (``<|im_start|>``,
``<|endoftext|>``, ...); added tokens that are not special (e.g. ``<tool_call>``) keep their use.
"""

from __future__ import annotations

import functools
import re
import secrets
from typing import Any

from mstar.api_server.http.errors import APIError


@functools.lru_cache(maxsize=8)
def special_pattern(tokenizer: Any) -> re.Pattern | None:
    """A regex matching any special token's text; None when the tokenizer has none."""
    texts = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special},
                   key=len, reverse=True)
    return re.compile("|".join(map(re.escape, texts))) if texts else None


def has_special_text(tokenizer: Any, text: Any) -> bool:
    pattern = special_pattern(tokenizer)
    return isinstance(text, str) and pattern is not None and pattern.search(text) is not None


def refuse_special_text(tokenizer: Any, messages: list[Any]) -> None:
    """``reject``: a 400 at the first message whose content holds special-token text."""
    for i, msg in enumerate(messages):
        if has_special_text(tokenizer, msg.text()):
            raise APIError(400, "message content holds special-token text (e.g. "
                           "'<|im_start|>'); MSTAR_SPECIAL_TOKENS_IN_CONTENT=reject refuses it",
                           f"messages.{i}.content")


def mark_special_contents(tokenizer: Any, messages: list[dict]) -> tuple[list[dict], dict]:
    """``escape``: the messages with each content holding special text replaced by a marker, and
    {marker: content}. Markers are random, so no content can forge one."""
    nonce = secrets.token_hex(8)
    contents: dict[str, str] = {}
    out = []
    for k, msg in enumerate(messages):
        if has_special_text(tokenizer, msg.get("content")):
            marker = f"\x1emstar-content-{nonce}-{k}\x1e"
            contents[marker] = msg["content"]
            msg = {**msg, "content": marker}
        out.append(msg)
    return out, contents


def encode_marked(tokenizer: Any, text: str, contents: dict[str, str]) -> list[int]:
    """Token ids of a rendered prompt whose ``contents`` sit at their markers: the template's
    text with special tokens, each content with special tokens split into plain text."""
    pattern = re.compile("|".join(map(re.escape, contents)))
    found = pattern.findall(text)
    if sorted(found) != sorted(contents):  # the template dropped or repeated a content
        raise APIError(400, "cannot keep special-token text in message content as plain text "
                       "with this chat template; set MSTAR_SPECIAL_TOKENS_IN_CONTENT=reject or "
                       "remove it", "messages")
    ids: list[int] = []
    for k, piece in enumerate(pattern.split(text)):
        if piece:
            ids += tokenizer.encode(piece, add_special_tokens=False)
        if k < len(found):
            ids += _plain_ids(tokenizer, contents[found[k]])
    return ids


def _plain_ids(tokenizer: Any, text: str) -> list[int]:
    if not tokenizer.is_fast:
        return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
    return _splitting_backend(tokenizer).encode(text, add_special_tokens=False).ids


@functools.lru_cache(maxsize=8)
def _splitting_backend(tokenizer: Any) -> Any:
    """A copy of the fast tokenizer that reads special-token text as plain text (a copy: setting
    it on the shared tokenizer would race with other threads' encodes)."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = True
    return backend
