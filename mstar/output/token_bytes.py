"""The exact bytes of every token, from the tokenizer's byte-level vocabulary.

``tokenizer.decode([id])`` turns a token that holds part of a UTF-8 character (a piece of an emoji
or a CJK character) into U+FFFD; its own bytes are in the vocabulary. Byte-level BPE vocabularies
(GPT-2 style) spell each byte as one printable character; SentencePiece ones spell a lone byte as
``<0xHH>`` and a space as U+2581. Added tokens (special or not) are their own text.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

_SPM_SPACE = "\u2581"


@cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte -> printable character table, inverted (character -> byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + shifted
            shifted += 1
    return {chr(c): b for b, c in chars.items()}


@cache
def _byte_level_table() -> dict[int, str]:
    """A ``str.translate`` table: each byte-level character -> the latin-1 character of its byte."""
    return {ord(c): chr(b) for c, b in _byte_level_alphabet().items()}


def _decoder_types(tokenizer: Any) -> set[str]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = None if backend is None else backend.decoder
    if decoder is None:
        return set()
    spec = json.loads(decoder.__getstate__())
    return {d["type"] for d in spec.get("decoders", [spec])}


def _spm_piece(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace(_SPM_SPACE, " ").encode()


class TokenBytes:
    """Every token's bytes, computed once (read-only afterwards, so any thread may read it)."""

    def __init__(self, tokenizer: Any) -> None:
        kinds = _decoder_types(tokenizer)
        added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        byte_level = "ByteLevel" in kinds
        spm = "ByteFallback" in kinds or "Metaspace" in kinds
        to_latin1 = _byte_level_table()
        table = []
        for i, piece in enumerate(pieces):
            if i in added or piece is None:
                table.append((added.get(i) or "").encode())
            elif byte_level:
                table.append(piece.translate(to_latin1).encode("latin-1", "replace"))
            elif spm:
                table.append(_spm_piece(piece))
            else:
                table.append(tokenizer.decode([i]).encode())
        self.table = table

    def of(self, token_id: int) -> bytes:
        """A token's bytes; an id past the tokenizer's vocabulary (padding rows) has none."""
        return self.table[token_id] if 0 <= token_id < len(self.table) else b""

    def shown(self, token_id: int) -> str:
        """How OpenAI shows a token: its text, or ``bytes:\\xHH...`` when its bytes are not whole
        UTF-8 characters."""
        data = self.of(token_id)
        try:
            return data.decode()
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in data)
