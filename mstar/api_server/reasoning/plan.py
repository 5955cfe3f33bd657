"""What a request's reasoning fields mean for this model: the chat template's switch, where the
output starts (inside a ``<think>`` section or not), the parser, and the output constraint.

The parser (MSTAR_REASONING_PARSER): ``think`` splits ``<think>...</think>`` out; ``none`` does
not; ``auto`` is ``think`` when the chat template contains ``<think>``.

The switch: ``enable_thinking`` (chat_template_kwargs) is passed to a template that reads
``enable_thinking`` (Qwen3, SmolLM3, ...). ``reasoning_effort`` is passed as is to a template that
reads ``reasoning_effort``; a template with only ``enable_thinking`` gets ``enable_thinking:
false`` for ``none`` and ``true`` for any other effort (the levels are not distinguished). A
template with no switch refuses the field (a 400 naming it).

Where the output starts comes from the template's generation prompt for these arguments (rendered
once per template and arguments): one that opens ``<think>`` without closing it starts ``inside``;
one that closes it (thinking switched off) starts ``off``; otherwise the model may open a section
(``optional``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mstar.api_server.http.errors import APIError
from mstar.api_server.reasoning.grammar import after_reasoning
from mstar.api_server.reasoning.split import END, START, ReasoningStream, Start
from mstar.api_server.tools.parsers.registry import template_source
from mstar.engine.request.sampling_params import StructuredOutput

ParserSetting = Literal["auto", "none", "think"]
THINKING_SWITCH = "enable_thinking"
EFFORT_SWITCH = "reasoning_effort"
PROBE = [{"role": "user", "content": "Hi"}]  # the conversation the generation prompt is read from


@dataclass(frozen=True)
class ReasoningPlan:
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # for apply_chat_template
    start: Start = "off"
    new_stream: Callable[[], ReasoningStream] | None = None  # None: no reasoning is split out
    structured_output: StructuredOutput | None = None  # the constraint, after the reasoning


async def request_reasoning_plan(req: Any, setting: ParserSetting, tokenizer: Any,
                                 constraint: StructuredOutput | None) -> ReasoningPlan:
    """``reasoning_plan`` of a ChatCompletionRequest; in a worker thread when it may build a
    grammar (a constraint) or render the template for new arguments."""
    kwargs = req.chat_template_kwargs
    thinking = kwargs.enable_thinking if kwargs is not None else None
    if constraint is None and thinking is None and req.reasoning_effort is None:
        return reasoning_plan(setting, tokenizer, None, None, None)  # the template is rendered once
    return await asyncio.to_thread(reasoning_plan, setting, tokenizer, thinking,
                                   req.reasoning_effort, constraint)


def reasoning_plan(setting: ParserSetting, tokenizer: Any, enable_thinking: bool | None,
                   effort: str | None, constraint: StructuredOutput | None,
                   params: tuple[str, str] = ("chat_template_kwargs.enable_thinking",
                                              "reasoning_effort")) -> ReasoningPlan:
    """The plan for these fields; ``params`` name them in a 400 (thinking switch, effort)."""
    source = template_source(tokenizer.chat_template)
    kwargs = template_switch(source, enable_thinking, effort, params)
    parser = setting if setting != "auto" else ("think" if START in source else "none")
    if parser == "none":
        return ReasoningPlan(kwargs, "off", None, constraint)
    start = generation_start(tokenizer, tuple(sorted(kwargs.items())))
    return ReasoningPlan(kwargs, start, functools.partial(ReasoningStream, start),
                         after_reasoning(constraint, start))


def template_switch(source: str, enable_thinking: bool | None, effort: str | None,
                    params: tuple[str, str]) -> dict[str, Any]:
    """The ``apply_chat_template`` arguments that carry the request's switch."""
    kwargs: dict[str, Any] = {}
    if enable_thinking is not None:
        if THINKING_SWITCH not in source:
            raise APIError(400, f"`{params[0]}` is not supported: the model's chat template has "
                           "no thinking switch", params[0])
        kwargs[THINKING_SWITCH] = enable_thinking
    if effort is not None:
        if EFFORT_SWITCH in source:
            kwargs[EFFORT_SWITCH] = effort
        elif THINKING_SWITCH in source and enable_thinking is None:
            kwargs[THINKING_SWITCH] = effort != "none"
        else:
            why = ("give one of the two" if THINKING_SWITCH in source
                   else "the model's chat template has no reasoning switch")
            raise APIError(400, f"`{params[1]}` is not supported: {why}", params[1])
    return kwargs


@functools.lru_cache(maxsize=16)
def generation_start(tokenizer: Any, kwargs: tuple[tuple[str, Any], ...]) -> Start:
    """Where an output starts after this template's generation prompt with these arguments."""
    try:
        with_prompt = tokenizer.apply_chat_template(PROBE, tokenize=False,
                                                    add_generation_prompt=True, **dict(kwargs))
        without = tokenizer.apply_chat_template(PROBE, tokenize=False,
                                                add_generation_prompt=False, **dict(kwargs))
    except Exception:  # noqa: BLE001 - a template may refuse the probe: the model decides
        return "optional"
    prompt = with_prompt[len(without):] if with_prompt.startswith(without) else with_prompt
    if prompt.rfind(START) > prompt.rfind(END):
        return "inside"
    return "off" if END in prompt else "optional"
