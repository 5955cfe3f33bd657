"""The request-size and vocabulary rules, in one place: the HTTP layer (400, while tokenizing and
again with max_tokens) and the engine (RequestRejected) call these functions."""

from __future__ import annotations

from mstar.engine.request.errors import RequestRejected

# A request's seed is 0 .. SEED_LIMIT - 1: what torch.Generator.manual_seed takes (choice i of a
# request samples with (seed + i) mod this).
SEED_LIMIT = 2**64


def check_request_fits(prompt_len: int, max_tokens: int, max_model_len: int,
                       prompt_field: str = "prompt", output_field: str = "max_tokens") -> None:
    """Raise RequestRejected (naming the field) unless prompt + max_tokens fits max_model_len.
    ``output_field``: the request's name for its output bound (speech: ``max_frames``)."""
    check_prompt_fits(prompt_len, max_model_len, prompt_field)
    total = prompt_len + max_tokens
    if total > max_model_len:
        raise RequestRejected(
            f"prompt ({prompt_len} tokens) + {output_field} ({max_tokens}) = {total} "
            f"exceeds max_model_len={max_model_len}", output_field)


def check_prompt_fits(prompt_len: int, max_model_len: int, prompt_field: str = "prompt") -> None:
    """The prompt alone: not empty, and room for at least one output token."""
    if prompt_len == 0:
        raise RequestRejected("prompt is empty: at least one prompt token is required", prompt_field)
    if prompt_len >= max_model_len:
        raise RequestRejected(
            f"prompt has {prompt_len} tokens; max_model_len={max_model_len} leaves no room for "
            "any output token", prompt_field)


def check_pooled_prompt_fits(prompt_len: int, max_model_len: int,
                             prompt_field: str = "input") -> None:
    """A pooling (embedding) request's input: not empty, at most max_model_len tokens."""
    if prompt_len == 0:
        raise RequestRejected("input is empty: at least one token is required", prompt_field)
    if prompt_len > max_model_len:
        raise RequestRejected(
            f"input has {prompt_len} tokens; the most is max_model_len={max_model_len}",
            prompt_field)


def check_logit_bias_ids(logit_bias: dict[int, float], vocab_size: int) -> None:
    """Every biased token id must be one the model can produce."""
    unknown = sorted(t for t in logit_bias if t >= vocab_size)
    if unknown:
        raise RequestRejected(
            f"logit_bias has token ids outside the vocabulary (0..{vocab_size - 1}): "
            f"{unknown[:5]}", "logit_bias")


def check_image_runs_fit(images, max_num_batched_tokens: int) -> None:
    """Models whose image tokens attend to each other both ways run each image's placeholder
    run in one step: it must fit the step's token budget."""
    for i, image in enumerate(images):
        if image.num_embeds > max_num_batched_tokens:
            raise RequestRejected(
                f"image {i} takes {image.num_embeds} tokens, all in one step for this model "
                f"(its image tokens attend to each other both ways); MSTAR_MAX_NUM_BATCHED_TOKENS="
                f"{max_num_batched_tokens}", "messages")
