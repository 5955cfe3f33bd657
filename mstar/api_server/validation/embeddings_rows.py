"""The rows of the request-field table (see ``field_table``) for POST /v1/embeddings. Fragments
are merged into a minimal valid request ({"input": "hi"})."""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import _rejected, _row

EMBEDDINGS = ("embeddings",)

ROWS: list[dict[str, Any]] = [
    _row("model", EMBEDDINGS, "supported", "As for chat.", accepted={},
         refused={"model": "no-such-model"}, refused_status=404),
    _row("input", EMBEDDINGS, "supported", "A string, a list of strings, a list of token ids or a "
         "list of token-id lists; each 1 .. max_model_len tokens, at most "
         "MSTAR_EMBEDDING_MAX_INPUTS items. A 400 names ``input`` (``input.N`` in a batch).",
         accepted={"input": [[1, 2], [3]]}, refused={"input": []}),
    _row("encoding_format", EMBEDDINGS, "supported", "``float`` (default) or ``base64`` (the "
         "little-endian float32 bytes).", accepted={"encoding_format": "base64"},
         refused={"encoding_format": "int8"}),
    _rejected("dimensions", EMBEDDINGS, "The vector is the model's hidden size; no served model "
              "is trained to be cut shorter (Matryoshka).", 64),
    _row("user", EMBEDDINGS, "ignored", "Accepted; not used.", accepted={"user": "u1"}),
]
