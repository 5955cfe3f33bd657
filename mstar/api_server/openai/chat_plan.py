"""A chat request made ready to run, and its output read back as pieces (text and tool calls).

The chat route, the Responses API and the Anthropic Messages API all plan their generation here:
the other two translate their request into a ``ChatCompletionRequest`` (``ChatTranslation``) and
read the output with ``PieceReader`` (chat's stream chunks are built on it in ``chat_output``), so every
API gets the same prompt, tool planning, output constraint and call parsing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from mstar.api_server.generation.facade import Generation
from mstar.api_server.generation.run import Job
from mstar.api_server.http.errors import APIError, validation_error
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.api_server.openai.structured import structured_output
from mstar.api_server.reasoning.plan import request_reasoning_plan
from mstar.api_server.reasoning.split import ReasoningStream
from mstar.api_server.tools.parsers.calls import Piece, ToolCall
from mstar.api_server.tools.plan import NO_TOOLS, ToolPlan, request_tool_plan
from mstar.prompt.value import Prompt


@dataclass(frozen=True)
class OutputReading:
    """How one choice's text is read back: reasoning split out first (``new_reasoning``, from
    ``reasoning.plan``; None: none is), then tool calls parsed from the rest (``tools``)."""

    tools: ToolPlan = NO_TOOLS
    new_reasoning: Callable[[], ReasoningStream] | None = None

    @property
    def plain(self) -> bool:
        """Whether the text is all content, read as it comes."""
        return self.tools.new_parser is None and self.new_reasoning is None


CONTINUE_FINAL = "continue_final_message"  # transformers' apply_chat_template argument


@dataclass(frozen=True)
class ChatPlan:
    reading: OutputReading
    prompt: Prompt
    jobs: list[Job]  # one per choice (n)


async def plan_chat(generation: Generation, settings: Any, req: ChatCompletionRequest,
                    continue_final: bool = False) -> ChatPlan:
    """Tools, reasoning, output constraint, prompt and sub-requests of a validated chat request
    (``settings``: the running ones). ``continue_final``: the prompt ends inside the final
    (assistant) message, which the output continues (Anthropic's prefill), instead of closing it
    and opening a new assistant turn."""
    tokenizer = generation.tokenizer
    requested = await structured_output(req, settings)
    tools = await request_tool_plan(req, settings.tool_call_parser, tokenizer.chat_template,
                                    requested, settings.tool_call_undeclared)
    reasoning = await request_reasoning_plan(req, settings.reasoning_parser, tokenizer,
                                             tools.structured_output)
    template_kwargs = {**reasoning.template_kwargs,
                       **({CONTINUE_FINAL: True} if continue_final else {})}
    prompt = await generation.chat_prompt(req, tools.shown_tools, template_kwargs)
    jobs = generation.jobs(req, [prompt], "messages", reasoning.structured_output)
    # A continued message is the answer itself: its text is not split for reasoning.
    new_reasoning = None if continue_final else reasoning.new_stream
    return ChatPlan(OutputReading(tools, new_reasoning), prompt, jobs)


Renames = list[tuple[re.Pattern[str], str]]  # chat field path -> the original API's


@dataclass(frozen=True)
class ChatTranslation:
    """Another API's request as a chat request, and where each chat message came from."""

    body: dict[str, Any]  # a ChatCompletionRequest's fields
    origins: list[str]  # per chat message: the original field it came from
    renames: Renames  # the original names of the other chat fields
    messages_field: str  # the original field of the messages as a whole
    continue_final: bool = False  # the final (assistant) message is continued: see plan_chat

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


async def plan_translated(generation: Generation, settings: Any, chat: ChatTranslation,
                          check: Callable[[ChatCompletionRequest], None] | None = None
                          ) -> ChatPlan:
    """The plan of a chat request another API's request was translated into (``check``: a rule
    its chat request must pass first, such as the content parts the model takes); an error's
    ``param`` names the field of the original request."""
    try:
        req = ChatCompletionRequest.model_validate(chat.body)
        if check is not None:
            check(req)
        return await plan_chat(generation, settings, req, chat.continue_final)
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

    def __init__(self, reading: OutputReading) -> None:
        tools = reading.tools
        self._parser = tools.new_parser() if tools.new_parser is not None else None
        self._reasoning = reading.new_reasoning() if reading.new_reasoning is not None else None
        self._parallel = tools.parallel
        self.calls = 0  # tool calls read so far (those returned)

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
