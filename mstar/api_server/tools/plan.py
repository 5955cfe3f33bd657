"""What a chat request's tool fields mean for this request: which tools the template shows, which
parser reads the output, and the grammar that forces a call.

tool_choice ``auto`` (the default when tools are given): tools shown, calls parsed. ``none``: tools
not shown, nothing parsed. ``required`` / a named function: as auto, and the output is constrained
to one call (or several with parallel_tool_calls) of the allowed functions, arguments valid for
their schemas. With a ``strict`` function, ``auto`` output is constrained too: text is free, but
whatever follows a ``<tool_call>`` tag is a valid call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.api_server.tools.calls import CallStream
from mstar.api_server.tools.checks import check_tool_messages, check_tools
from mstar.api_server.tools.registry import parser_name, stream_factory
from mstar.engine.sampling_params import StructuredOutput

ANY_OBJECT: dict[str, Any] = {"type": "object"}  # the arguments of a function without parameters


@dataclass(frozen=True)
class ToolPlan:
    shown_tools: list[dict] | None = None  # OpenAI tool objects for the template; None: none
    new_parser: Callable[[], CallStream] | None = None  # None: the output is plain content
    structured_output: StructuredOutput | None = None  # forces a call (required / named)
    parallel: bool = True  # more than one call per reply


NO_TOOLS = ToolPlan()


async def request_tool_plan(req: Any, parser_setting: str, chat_template: Any) -> ToolPlan:
    """``tool_plan``, in a worker thread when there are tools (schema checks and grammar building
    take time in proportion to them), so the event loop never waits on them."""
    if not req.tools:
        return tool_plan(req, parser_setting, chat_template)
    return await asyncio.to_thread(tool_plan, req, parser_setting, chat_template)


def tool_plan(req: Any, parser_setting: str, chat_template: Any) -> ToolPlan:
    """The plan of a ChatCompletionRequest; a 400 naming the field when its tool fields are wrong.

    ``parser_setting`` is MSTAR_TOOL_CALL_PARSER; ``chat_template`` the tokenizer's.
    """
    check_tool_messages(req.messages)
    tools = req.tools or []
    check_tools(tools)
    choice = req.tool_choice if req.tool_choice is not None else "auto"
    if (choice == "required" or not isinstance(choice, str)) and not tools:
        raise APIError(400, "tool_choice requires tools; none were given", "tool_choice")
    if not tools or choice == "none":
        return NO_TOOLS
    return ToolPlan(
        shown_tools=[t.model_dump(exclude_none=True) for t in tools],
        new_parser=stream_factory(parser_name(parser_setting, chat_template)),
        structured_output=_constraint(tools, choice, req.parallel_tool_calls),
        parallel=req.parallel_tool_calls)


def _constraint(tools: list[Any], choice: Any, parallel: bool) -> StructuredOutput | None:
    """The grammar of a forced call (required / named), or of free text whose calls are checked
    (auto with a strict function); None when the output is free."""
    from mstar.api_server.tools import grammar

    if choice == "auto":
        if not any(t.function.strict for t in tools):
            return None
        allowed = list(enumerate(tools))
        build = grammar.calls_in_text_grammar
    elif choice == "required":
        allowed = list(enumerate(tools))
        build = grammar.forced_call_grammar
    else:
        allowed = [(i, t) for i, t in enumerate(tools) if t.function.name == choice.function.name]
        if not allowed:
            raise APIError(400, f"tool_choice names function {choice.function.name!r}, which is "
                           "not in tools", "tool_choice")
        parallel = False  # a named function is called once
        build = grammar.forced_call_grammar
    functions = [(t.function.name, _arguments_schema(t, choice)) for _, t in allowed]
    try:
        spec = build(functions, parallel)
    except grammar.ParametersError as exc:
        index = allowed[exc.position][0]
        raise APIError(400, f"cannot constrain arguments to this schema: {exc}",
                       f"tools.{index}.function.parameters") from None
    return StructuredOutput(kind="grammar", spec=spec)


def _arguments_schema(tool: Any, choice: Any) -> dict:
    """The schema a call's arguments are held to: the function's own, except in auto mode where
    only ``strict`` functions are held to theirs (the others to any object)."""
    if choice == "auto" and not tool.function.strict:
        return ANY_OBJECT
    return tool.function.parameters or ANY_OBJECT


def output_constraint(plan: ToolPlan, requested: StructuredOutput | None
                      ) -> StructuredOutput | None:
    """The request's one output constraint: the plan's call grammar or ``requested``
    (response_format / guided_*); a 400 on ``tool_choice`` when a request asks for both."""
    if plan.structured_output is None:
        return requested
    if requested is not None:
        raise APIError(400, "constrained tool calls (tool_choice required or a named function, or "
                       "a strict function) cannot be combined with response_format or guided_* "
                       "output constraints", "tool_choice")
    return plan.structured_output
