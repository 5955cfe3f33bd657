"""Special-token text typed inside a chat message never becomes a special token, on every prompt
path: the API server's text chat (``api_server.generation.prompts``), /tokenize, and chats with
images (``chat_media.build_marked``) all render and tokenize through the functions here.

A tokenizer turns the text ``<|im_start|>`` into its special token wherever it appears, so a user
(or a tool's result) who types it could open a turn of their own, e.g. a system turn. Escaping
(MSTAR_SPECIAL_TOKENS_IN_CONTENT=escape, the API server's default): the chat template is rendered
with each content (or text part) that holds such text replaced by a marker; the rendered text is
cut at the markers (``split_marked``), the template's pieces are tokenized as usual (its special
tokens stay special, an image marker is expanded by the processor) and each content is tokenized
with special tokens split, as the characters they are (``plain_ids``). Contents free of special
text, the usual case, are left in the template: their tokens are exactly the plain rendering's.

The special texts are the tokenizer's added tokens marked special (``<|im_start|>``,
``<|endoftext|>``, ``<image>``...); added tokens that are not special (e.g. ``<tool_call>``) keep
their use.
"""

from __future__ import annotations

import functools
import re
import secrets
from typing import Any

Contents = dict[str, str]  # marker -> the content it stands for


class MarkerLost(ValueError):
    """The chat template dropped or repeated a marked content: it cannot be kept as plain text."""


@functools.lru_cache(maxsize=8)
def special_pattern(tokenizer: Any) -> re.Pattern | None:
    """A regex matching any special token's text; None when the tokenizer has none."""
    texts = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special},
                   key=len, reverse=True)
    return re.compile("|".join(map(re.escape, texts))) if texts else None


def has_special_text(tokenizer: Any, text: Any) -> bool:
    pattern = special_pattern(tokenizer)
    return isinstance(text, str) and pattern is not None and pattern.search(text) is not None


def message_text(message: dict[str, Any]) -> str:
    """A message dict's text: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if p.get("type") == "text")
    return content if isinstance(content, str) else ""


def mark_special_contents(tokenizer: Any, messages: list[dict]) -> tuple[list[dict], Contents]:
    """The messages with each content (a string, or a text part of a list) holding special text
    replaced by a marker, and {marker: content}. Markers are random, so no content can forge
    one."""
    nonce = secrets.token_hex(8)
    contents: Contents = {}

    def marked(text: Any) -> Any:
        if not has_special_text(tokenizer, text):
            return text
        marker = f"\x1emstar-content-{nonce}-{len(contents)}\x1e"
        contents[marker] = text
        return marker

    out = []
    for msg in messages:
        content = msg.get("content")
        if isinstance(content, list):
            msg = {**msg, "content": [{**p, "text": marked(p.get("text"))}
                                      if p.get("type") == "text" else p for p in content]}
        elif isinstance(content, str):
            msg = {**msg, "content": marked(content)}
        out.append(msg)
    return out, contents


def unmarked_chars(text: str, contents: Contents) -> int:
    """The length of rendered ``text`` with each marker replaced by its content (what the
    MSTAR_MAX_PROMPT_CHARS bound measures: a marker must not hide a long content)."""
    return len(text) + sum(len(content) - len(marker) for marker, content in contents.items())


def split_marked(text: str, contents: Contents) -> list[tuple[str, bool]]:
    """Rendered ``text`` as (piece, is_content) in order: the template's pieces (False) and each
    marked content at its place (True); MarkerLost if the template dropped or repeated one."""
    pattern = re.compile("|".join(map(re.escape, contents)))
    found = pattern.findall(text)
    if sorted(found) != sorted(contents):
        raise MarkerLost("cannot keep special-token text in message content as plain text with "
                         "this chat template")
    out: list[tuple[str, bool]] = []
    for k, piece in enumerate(pattern.split(text)):
        out += [(piece, False)] if piece else []
        out += [(contents[found[k]], True)] if k < len(found) else []
    return out


def encode_marked(tokenizer: Any, text: str, contents: Contents) -> list[int]:
    """Token ids of a rendered prompt whose ``contents`` sit at their markers: the template's
    text with special tokens, each content with special tokens split into plain text."""
    ids: list[int] = []
    for piece, is_content in split_marked(text, contents):
        ids += plain_ids(tokenizer, piece) if is_content else tokenizer.encode(
            piece, add_special_tokens=False)
    return ids


def plain_ids(tokenizer: Any, text: str) -> list[int]:
    """``text``'s token ids with special-token text read as the characters it is."""
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
