"""Incremental detokenization and stop-string handling for one sequence."""

from __future__ import annotations

from collections.abc import Callable

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

# Prompt tokens used as decoding context so the first output token's leading
# space / byte merges come out as they would inside the full text.
_CONTEXT_TOKENS = 6


def text_of(tokenizer: PreTrainedTokenizerBase) -> Callable[[list[int]], str]:
    """``tokenizer.decode(ids, skip_special_tokens=True)``, as a function of the ids.

    A fast tokenizer whose class keeps transformers' own decoding and that cleans up no spaces is
    decoded by its Rust backend directly: the same text, without the wrapper, which costs twice
    the decode itself (the API server decodes twice per streamed token). Any other tokenizer (one
    that cleans up spaces, or decodes its own way, like Whisper's) goes through ``decode``.
    """
    cls = type(tokenizer)
    direct = (isinstance(tokenizer, PreTrainedTokenizerFast)
              and cls.decode is PreTrainedTokenizerFast.decode
              and cls._decode is PreTrainedTokenizerFast._decode
              and not tokenizer.clean_up_tokenization_spaces)
    if direct:
        backend = tokenizer.backend_tokenizer
        return lambda ids: backend.decode(ids, skip_special_tokens=True)
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


class IncrementalDetokenizer:
    """Turns appended token ids into text deltas.

    Text that could still be the start of a stop string is held back until it
    is known not to be one, so the concatenated deltas never contain a stop string.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop: list[str], prompt_token_ids: list[int]
    ) -> None:
        self._decode = text_of(tokenizer)
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        # The prompt tail is decoding context only: it is never part of the output text.
        self.tokens: list[int] = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.tokens)
        self.text = ""
        self.emitted = 0

    def append(self, token_id: int) -> bool:
        """Add a token; return True when a stop string appeared (text is then truncated)."""
        self.tokens.append(token_id)
        prefix = self._decode(self.tokens[self.prefix_offset : self.read_offset])
        full = self._decode(self.tokens[self.prefix_offset :])
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return False
        start = len(self.text)
        self.text += full[len(prefix) :]
        self.prefix_offset = self.read_offset
        self.read_offset = len(self.tokens)
        if self.stop:
            return self._check_stop(max(0, start - self.holdback))
        return False

    def _check_stop(self, search_from: int) -> bool:
        hits = [i for s in self.stop if (i := self.text.find(s, search_from)) != -1]
        if not hits:
            return False
        self.text = self.text[: min(hits)]
        return True

    def take_delta(self, finished: bool) -> str:
        """Text not yet handed out; keeps a possible stop-string prefix unless finished."""
        end = len(self.text) if finished else max(self.emitted, len(self.text) - self.holdback)
        delta = self.text[self.emitted : end]
        self.emitted = end
        return delta
