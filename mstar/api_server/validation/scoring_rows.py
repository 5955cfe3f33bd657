"""The rows of the request-field table (see ``field_table``) for POST /v1/rerank, /v1/score and
/v1/classify. Fragments are merged into a minimal valid request of each."""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import _rejected, _row

RERANK, SCORE, CLASSIFY = ("rerank",), ("score",), ("classify",)
ALL = ("rerank", "score", "classify")
TRUNCATION = "Inputs are never cut: one past max_model_len is a 400 naming it."

ROWS: list[dict[str, Any]] = [
    _row("model", ALL, "supported", "As for chat; the served model needs a classifier head "
         "(a 400 naming ``model`` otherwise).", accepted={}, refused={"model": "no-such-model"},
         refused_status=404),
    _row("query", RERANK, "supported", "Required: what the documents are ranked against.",
         accepted={"query": "which one?"}, refused={"query": 5}),
    _row("documents", RERANK, "supported", "Strings or objects with ``text``; at most "
         "MSTAR_EMBEDDING_MAX_INPUTS. A pair's error names ``documents.N``.",
         accepted={"documents": [{"text": "a"}, "b"]}, refused={"documents": []}),
    _row("top_n", RERANK, "supported", "The best n results (>= 1); absent: all, best first.",
         accepted={"top_n": 1}, refused={"top_n": 0}),
    _row("return_documents", RERANK, "supported", "Each result holds ``document.text`` "
         "(default true).", accepted={"return_documents": False},
         refused={"return_documents": "yes"}),
    _rejected("max_tokens_per_doc", RERANK, TRUNCATION + " (Cohere v2)", 512),
    _rejected("max_chunks_per_doc", RERANK, TRUNCATION + " (Cohere v1)", 4),
    _rejected("rank_fields", RERANK, "Documents are ranked by their ``text`` (Cohere v1).",
              ["title"]),
    _row("text_1", SCORE, "supported", "The query: a string, or a list with one per ``text_2`` "
         "entry (or one for all).", accepted={"text_1": ["q"]}, refused={"text_1": []}),
    _row("text_2", SCORE, "supported", "The documents: a string or a list (at most "
         "MSTAR_EMBEDDING_MAX_INPUTS); a pair's error names ``text_2.N``.",
         accepted={"text_2": "d"}, refused={"text_2": []}),
    _row("input", CLASSIFY, "supported", "A string or a list of strings (at most "
         "MSTAR_EMBEDDING_MAX_INPUTS); an error names ``input`` (``input.N`` in a batch).",
         accepted={"input": ["a", "b"]}, refused={"input": []}),
    _rejected("truncate_prompt_tokens", ALL, TRUNCATION, 16),
    _row("user", ALL, "ignored", "Accepted; not used.", accepted={"user": "u1"}),
]
