"""Incremental detokenization and stop-string handling for one sequence."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

# Prompt tokens used as decoding context so the first output token's leading
# space / byte merges come out as they would inside the full text.
_CONTEXT_TOKENS = 6


class IncrementalDetokenizer:
    """Turns appended token ids into text deltas.

    Text that could still be the start of a stop string is held back until it
    is known not to be one, so the concatenated deltas never contain a stop string.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, stop: list[str], prompt_token_ids: list[int]
    ) -> None:
        self.tokenizer = tokenizer
        self.stop = stop
        self.holdback = max((len(s) for s in stop), default=1) - 1
        # The prompt tail is decoding context only: it is never part of the output text.
        self.tokens: list[int] = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.tokens)
        self.text = ""
        self.emitted = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

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
