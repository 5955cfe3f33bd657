"""(query, document) pairs as prompt token ids, for rerank and score.

With MSTAR_SCORE_TEMPLATE, the template's text with ``{query}`` and ``{document}`` filled in (in
one pass: a query holding the text ``{document}`` stays as it is), tokenized as a prompt (special
tokens written in the template are parsed as such). Without it, the tokenizer's own pair encoding
(``tokenizer(query, document)``), which is what transformers feeds a cross-encoder. Every limit of
a prompt holds (MSTAR_MAX_PROMPT_CHARS, max_model_len); an error names the document's field.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from mstar.api_server.generation.prompts import check_prompt_len, encode
from mstar.api_server.http.bounds import check_prompt_chars
from mstar.prompt.value import Prompt

SLOTS = re.compile(r"\{(query|document)\}")


def read_template(path: Path | None) -> str | None:
    """MSTAR_SCORE_TEMPLATE's text (read once, at start)."""
    return None if path is None else Path(path).expanduser().read_text(encoding="utf-8")


def filled(template: str, query: str, document: str) -> str:
    values = {"query": query, "document": document}
    return SLOTS.sub(lambda m: values[m[1]], template)


def pair_ids(tokenizer: Any, settings: Any, max_model_len: int, template: str | None,
             query: str, document: str, param: str) -> list[int]:
    """One pair's prompt ids; an error names ``param``."""
    if template is not None:
        text = filled(template, query, document)
        check_prompt_chars(len(text), settings.max_prompt_chars, param)
        return encode(tokenizer, text, True, max_model_len, param, pooled=True)
    check_prompt_chars(len(query) + len(document), settings.max_prompt_chars, param)
    ids = tokenizer(query, document, add_special_tokens=True)["input_ids"]
    check_prompt_len(len(ids), max_model_len, param, pooled=True)
    return list(ids)


async def pair_prompts(tokenizer: Any, settings: Any, max_model_len: int, template: str | None,
                       pairs: list[tuple[str, str]], field: str) -> list[Prompt]:
    """Every pair's prompt, tokenized off the event loop; pair k's error names ``field.k``."""
    def all_ids() -> list[Prompt]:
        return [Prompt(pair_ids(tokenizer, settings, max_model_len, template, q, d,
                                f"{field}.{k}")) for k, (q, d) in enumerate(pairs)]

    return await asyncio.to_thread(all_ids)
