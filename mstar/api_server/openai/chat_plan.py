"""A chat request made ready to run, and its output read back as pieces (text and tool calls).

The chat route, the Responses API and the Anthropic Messages API all plan their generation here:
the other two translate their request into a ``ChatCompletionRequest`` (``ChatTranslation``) and
read the output with ``PieceReader`` (chat builds its own chunks in ``tools.response``), so every
API gets the same prompt, tool planning, output constraint and call parsing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from mstar.api_server.generation.prompts import chat_prompt_ids
from mstar.api_server.generation.run import Job, jobs_for
from mstar.api_server.http.errors import APIError, validation_error
from mstar.api_server.media.prompt import has_images, image_chat_prompt
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.api_server.openai.structured import structured_output
from mstar.api_server.reasoning.plan import request_reasoning_plan
from mstar.api_server.state import ServerState
from mstar.api_server.tools.parsers.calls import Piece, ToolCall
from mstar.api_server.tools.plan import ToolPlan, request_tool_plan


@dataclass(frozen=True)
class ChatPlan:
    tools: ToolPlan
    prompt: list[int]  # the prompt's token ids
    jobs: list[Job]  # one per choice (n)


async def plan_chat(state: ServerState, req: ChatCompletionRequest) -> ChatPlan:
    """Tools, reasoning, output constraint, prompt and sub-requests of a validated chat request."""
    requested = await structured_output(req, state.settings)
    tools = await request_tool_plan(req, state.settings.tool_call_parser,
                                    state.tokenizer.chat_template, requested,
                                    state.settings.tool_call_undeclared)
    reasoning = await request_reasoning_plan(req, state.settings.reasoning_parser,
                                             state.tokenizer, tools.structured_output)
    if state.processor is not None and has_images(req):  # a vision model's image request
        prompt = await image_chat_prompt(state, req)
    else:
        prompt = await chat_prompt_ids(state, req, tools.shown_tools, reasoning.template_kwargs)
    jobs = jobs_for(state, req, [prompt], "messages", reasoning.structured_output)
    return ChatPlan(replace(tools, new_reasoning=reasoning.new_stream), prompt, jobs)


Renames = list[tuple[re.Pattern[str], str]]  # chat field path -> the original API's


@dataclass(frozen=True)
class ChatTranslation:
    """Another API's request as a chat request, and where each chat message came from."""

    body: dict[str, Any]  # a ChatCompletionRequest's fields
    origins: list[str]  # per chat message: the original field it came from
    renames: Renames  # the original names of the other chat fields
    messages_field: str  # the original field of the messages as a whole

    def original_param(self, param: str | None) -> str | None:
        """The original request's field a chat request's ``param`` names."""
        if param is None:
            return None
        found = re.match(r"^messages(?:\.(\d+))?", param)
        if found:
            index = found[1]
            known = index is not None and int(index) < len(self.origins)
            return self.origins[int(index)] if known else self.messages_field
        for pattern, replacement in self.renames:
            param = pattern.sub(replacement, param)
        return param


async def plan_translated(state: ServerState, chat: ChatTranslation) -> ChatPlan:
    """The plan of a chat request another API's request was translated into; an error's
    ``param`` names the field of the original request."""
    try:
        return await plan_chat(state, ChatCompletionRequest.model_validate(chat.body))
    except ValidationError as exc:
        err = validation_error(exc, chat.body)
        raise APIError(400, err.message, chat.original_param(err.param)) from None
    except APIError as exc:
        raise APIError(exc.status, exc.message, chat.original_param(exc.param), exc.code,
                       exc.kind) from None


@dataclass(frozen=True)
class ReasoningText:
    """Reasoning the model wrote before its answer (split out by the reasoning parser)."""

    text: str


class PieceReader:
    """One choice's output text as it streams: reasoning first (with a reasoning parser), then
    content text and complete tool calls (only the first call without parallel_tool_calls)."""

    def __init__(self, plan: ToolPlan) -> None:
        self._parser = plan.new_parser() if plan.new_parser is not None else None
        self._reasoning = plan.new_reasoning() if plan.new_reasoning is not None else None
        self._parallel = plan.parallel
        self.calls = 0

    def read(self, text: str, finished: bool) -> list[Piece | ReasoningText]:
        out: list[Piece | ReasoningText] = []
        if self._reasoning is not None:
            reasoning, text = self._reasoning.feed(text)
            if finished:
                more_reasoning, more_text = self._reasoning.finish()
                reasoning, text = reasoning + more_reasoning, text + more_text
            out += [ReasoningText(reasoning)] if reasoning else []
        if self._parser is None:
            return out + ([text] if text else [])
        for piece in self._parser.feed(text) + (self._parser.finish() if finished else []):
            if isinstance(piece, ToolCall):
                if self.calls and not self._parallel:
                    continue
                self.calls += 1
            out.append(piece)
        return out
