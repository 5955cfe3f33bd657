"""What a chat request's tool fields mean for this request: which tools the template shows, which
parser reads the output, and the request's output constraint (tool grammar and response_format).

tool_choice ``auto`` (the default when tools are given): tools shown, calls parsed. ``none``: tools
not shown, nothing parsed. ``required`` / a named function: as auto, and the output is constrained
to one call (or several with parallel_tool_calls) of the allowed functions, arguments valid for
their schemas; a ``response_format`` is then for the later turns, not this one. With a ``strict``
function, ``auto`` output is constrained too: text is free, but whatever follows a ``<tool_call>``
tag is a valid call. ``auto`` with a ``response_format`` (or a ``guided_*`` constraint): either
calls (strict functions' arguments valid for their schemas) or the requested output.

A function without ``parameters`` takes none: its arguments are ``{}``.

``tool_plan`` (chat's request) and ``plan_tools`` (the fields alone, for other routes) are public.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mstar.api_server.http.errors import APIError
from mstar.api_server.tools.checks import check_tool_messages, check_tools
from mstar.api_server.tools.parsers.calls import CallStream, Declared
from mstar.api_server.tools.parsers.registry import CONSTRAINED_FORMAT, parser_name, stream_factory
from mstar.engine.request.sampling_params import StructuredOutput

ANY_OBJECT: dict[str, Any] = {"type": "object"}  # a non-strict function's arguments in auto mode
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
Undeclared = Literal["text", "drop"]


@dataclass(frozen=True)
class ToolPlan:
    shown_tools: list[dict] | None = None  # OpenAI tool objects for the template; None: none
    new_parser: Callable[[], CallStream] | None = None  # None: the output is plain content
    structured_output: StructuredOutput | None = None  # the request's whole output constraint
    parallel: bool = True  # more than one call per reply


NO_TOOLS = ToolPlan()


async def request_tool_plan(req: Any, parser_setting: str, chat_template: Any,
                            requested: StructuredOutput | None = None,
                            undeclared: Undeclared = "text") -> ToolPlan:
    """``tool_plan``, in a worker thread when there are tools (schema checks and grammar building
    take time in proportion to them), so the event loop never waits on them."""
    if not req.tools:
        return tool_plan(req, parser_setting, chat_template, requested, undeclared)
    return await asyncio.to_thread(tool_plan, req, parser_setting, chat_template, requested,
                                   undeclared)


def tool_plan(req: Any, parser_setting: str, chat_template: Any,
              requested: StructuredOutput | None = None, undeclared: Undeclared = "text"
              ) -> ToolPlan:
    """The plan of a ChatCompletionRequest; a 400 naming the field when its tool fields are wrong.

    ``parser_setting`` is MSTAR_TOOL_CALL_PARSER; ``chat_template`` the tokenizer's;
    ``requested`` the request's response_format / guided_* constraint; ``undeclared``
    MSTAR_TOOL_CALL_UNDECLARED.
    """
    check_tool_messages(req.messages)
    return plan_tools(req.tools or [], req.tool_choice, req.parallel_tool_calls, parser_setting,
                      chat_template, requested, undeclared)


def plan_tools(tools: list[Any], choice: Any, parallel: bool, parser_setting: str,
               chat_template: Any, requested: StructuredOutput | None = None,
               undeclared: Undeclared = "text") -> ToolPlan:
    """The plan of tool fields in chat's shape (``tools``: ChatTool models, ``choice``: a
    tool_choice value or None); errors name ``tools.N...`` and ``tool_choice``."""
    check_tools(tools)
    choice = choice if choice is not None else "auto"
    if (choice == "required" or not isinstance(choice, str)) and not tools:
        raise APIError(400, "tool_choice requires tools; none were given", "tool_choice")
    if not tools or choice == "none":
        return ToolPlan(structured_output=requested)
    constraint = _constraint(tools, choice, parallel, requested)
    calls_constrained = constraint is not None and constraint is not requested
    name = CONSTRAINED_FORMAT if calls_constrained else parser_name(parser_setting, chat_template)
    declared = Declared({t.function.name: t.function.parameters or NO_PARAMETERS for t in tools},
                        undeclared)
    return ToolPlan(
        shown_tools=[t.model_dump(exclude_none=True) for t in tools],
        new_parser=functools.partial(stream_factory(name), declared),
        structured_output=constraint,
        parallel=parallel)


def _constraint(tools: list[Any], choice: Any, parallel: bool,
                requested: StructuredOutput | None) -> StructuredOutput | None:
    """The request's output constraint: a forced call (required / named); in auto mode calls or
    the requested output, or free text whose calls are checked (a strict function), or just
    ``requested`` (None when the output is free)."""
    from mstar.api_server.tools import grammar

    if choice == "auto":
        allowed = list(enumerate(tools))
        if requested is not None:
            build = functools.partial(grammar.calls_or_output_grammar, output=requested)
        elif any(t.function.strict for t in tools):
            build = grammar.calls_in_text_grammar
        else:
            return None
    elif choice == "required":
        allowed = list(enumerate(tools))
        build = grammar.forced_call_grammar
    else:
        allowed = [(i, t) for i, t in enumerate(tools) if t.function.name == choice.function.name]
        if not allowed:
            raise APIError(400, f"tool_choice names function {choice.function.name!r}, which is "
                           "not in tools", "tool_choice.function.name")
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
    """The schema a call's arguments are held to: the function's own (none: ``{}``), except in
    auto mode where only ``strict`` functions are held to theirs (the others to any object)."""
    if choice == "auto" and not tool.function.strict:
        return ANY_OBJECT
    return tool.function.parameters or NO_PARAMETERS
