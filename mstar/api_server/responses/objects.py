"""The response object (what POST returns, GET reads back and the stream's first and last events
carry), and its output as input items of a follow-up (``previous_response_id``)."""

from __future__ import annotations

from typing import Any

from mstar.api_server.responses.protocol import InputItem, ResponsesRequest


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + output_tokens}


def _text_format(req: ResponsesRequest) -> dict[str, Any]:
    fmt = req.text.format if req.text is not None else None
    if fmt is None:
        return {"type": "text"}
    return fmt.model_dump(exclude_none=True, by_alias=True)


def _tool_choice(req: ResponsesRequest) -> Any:
    if req.tool_choice is None:
        return "auto"
    return req.tool_choice if isinstance(req.tool_choice, str) else req.tool_choice.model_dump()


def response_object(response_id: str, req: ResponsesRequest, model: str, created: int,
                    status: str, output: list[dict[str, Any]],
                    usage: dict[str, Any] | None) -> dict[str, Any]:
    """``status``: in_progress (the stream's opening events), completed, or incomplete (cut by
    max_output_tokens)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": response_id, "object": "response", "created_at": created, "status": status,
        "background": False, "error": None, "incomplete_details": incomplete,
        "instructions": req.instructions, "max_output_tokens": req.max_output_tokens,
        "model": model, "output": output, "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {"effort": None, "summary": None}, "store": req.store,
        "temperature": req.temperature, "text": {"format": _text_format(req)},
        "tool_choice": _tool_choice(req), "tools": [t.resolved() for t in req.tools or []],
        "top_p": req.top_p, "truncation": "disabled", "usage": usage, "user": req.user,
        "metadata": req.metadata or {}}


def as_input(item: dict[str, Any]) -> InputItem | None:
    """An output item as the input item a follow-up sends back (reasoning: not shown again)."""
    if item["type"] == "message":
        return InputItem(type="message", role="assistant",
                         content="".join(part["text"] for part in item["content"]))
    if item["type"] == "function_call":
        return InputItem(type="function_call", call_id=item["call_id"], name=item["name"],
                         arguments=item["arguments"])
    return None
