"""The request-size rule, in one place: the HTTP layer (400) and the engine (RequestRejected) both
call ``check_request_fits``."""

from __future__ import annotations

from mstar.engine.errors import RequestRejected


def check_request_fits(prompt_len: int, max_tokens: int, max_model_len: int,
                       prompt_field: str = "prompt") -> None:
    """Raise RequestRejected (naming the field) unless prompt + max_tokens fits max_model_len."""
    if prompt_len == 0:
        raise RequestRejected("prompt is empty: at least one prompt token is required", prompt_field)
    if prompt_len >= max_model_len:
        raise RequestRejected(
            f"prompt has {prompt_len} tokens; max_model_len={max_model_len} leaves no room for "
            "any output token", prompt_field)
    total = prompt_len + max_tokens
    if total > max_model_len:
        raise RequestRejected(
            f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) = {total} "
            f"exceeds max_model_len={max_model_len}", "max_tokens")
