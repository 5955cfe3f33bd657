"""Special-token text typed inside a chat message never becomes a special token, as
MSTAR_SPECIAL_TOKENS_IN_CONTENT chooses, on every prompt path (text chat, /tokenize, images):

- ``escape`` (the default): tokenized as the plain text it is (``mstar.prompt.special_text``, one
  implementation for every path; ``encode_marked`` here is its text-only tokenizing, its failure
  a 400).
- ``reject``: a 400 naming the message's content (``refuse_special_text``).
"""

from __future__ import annotations

from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.prompt import special_text
from mstar.prompt.special_text import Contents, MarkerLost

LOST = ("; set MSTAR_SPECIAL_TOKENS_IN_CONTENT=reject or remove it")


def refuse_special_text(tokenizer: Any, texts: list[str]) -> None:
    """``reject``: a 400 at the first message whose text (``texts[i]``: message i's) holds
    special-token text."""
    for i, text in enumerate(texts):
        if special_text.has_special_text(tokenizer, text):
            raise APIError(400, "message content holds special-token text (e.g. "
                           "'<|im_start|>'); MSTAR_SPECIAL_TOKENS_IN_CONTENT=reject refuses it",
                           f"messages.{i}.content")


def lost_marker(exc: MarkerLost) -> APIError:
    """The 400 of a chat template that dropped or repeated a marked content."""
    return APIError(400, f"{exc}{LOST}", "messages")


def encode_marked(tokenizer: Any, text: str, contents: Contents) -> list[int]:
    try:
        return special_text.encode_marked(tokenizer, text, contents)
    except MarkerLost as exc:
        raise lost_marker(exc) from None
