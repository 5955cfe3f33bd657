"""The rows of the request-field table (see ``field_table``) for POST /v1/messages (Anthropic's
Messages API). Fragments are merged into a minimal valid request (model, one user message,
max_tokens)."""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import SCHEMA, _rejected, _row

MESSAGES = ("messages",)
TOOL = {"name": "f", "input_schema": {"type": "object"}}
ROUND_TRIP = [{"role": "user", "content": "hi"},
              {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                                 "input": {}}]},
              {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                            "content": "1"}]}]

ROWS: list[dict[str, Any]] = [
    _row("model", MESSAGES, "supported", "Required; as for chat.", accepted={},
         refused={"model": "no-such-model"}, refused_status=404),
    _row("messages", MESSAGES, "supported", "At least one; roles user and assistant; content a "
         "string or text blocks.",
         accepted={"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
         refused={"messages": []}),
    _row("messages.*.content (tool_use, tool_result blocks)", MESSAGES, "tool calling",
         "An assistant's tool calls, and the user's results (``is_error`` is not shown).",
         accepted={"messages": ROUND_TRIP, "tools": [TOOL]}),
    _row("messages.*.content (image, document, thinking, ... blocks)", MESSAGES, "rejected",
         "Text, tool_use and tool_result blocks only.",
         refused={"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
         param="messages.0.content.0.type"),
    _row("max_tokens", MESSAGES, "supported", "Required; 1 .. 2**31-1 and prompt + max_tokens <= "
         "max_model_len.", accepted={"max_tokens": 3}, refused={"max_tokens": 0}),
    _row("system", MESSAGES, "supported", "A string or text blocks: a system message first.",
         accepted={"system": [{"type": "text", "text": "Be brief."}]}, refused={"system": 5}),
    _row("stop_sequences", MESSAGES, "supported", "Non-empty strings; the one that ended the "
         "output is ``stop_sequence`` (stop_reason ``stop_sequence``).",
         accepted={"stop_sequences": ["x"]}, refused={"stop_sequences": [""]},
         param="stop_sequences.0"),
    _row("stream", MESSAGES, "supported", "Typed server-sent events, message_start .. "
         "message_stop.", accepted={"stream": True}, refused={"stream": "abc"}),
    _row("temperature", MESSAGES, "supported", "0 .. 1.", accepted={"temperature": 0.5},
         refused={"temperature": 1.5}),
    _row("top_p", MESSAGES, "supported", "(0, 1].", accepted={"top_p": 0.5},
         refused={"top_p": 0}),
    _row("top_k", MESSAGES, "supported", ">= 1 (-1 is off).", accepted={"top_k": 5},
         refused={"top_k": -2}),
    _row("tools", MESSAGES, "tool calling", "Client tools (``input_schema``); server tools "
         "(web search, code execution, ...) are a 400.", accepted={"tools": [TOOL]},
         refused={"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
         param="tools.0.type"),
    _row("tool_choice", MESSAGES, "tool calling", "auto, any (a call is forced), tool (that one "
         "is), none; ``disable_parallel_tool_use``.",
         accepted={"tools": [TOOL], "tool_choice": {"type": "any"}},
         refused={"tool_choice": {"type": "sometimes"}}, param="tool_choice.type"),
    _row("output_config", MESSAGES, "supported", "``format``: ``{\"type\": \"json_schema\", "
         "\"schema\": ...}`` (structured output); ``effort`` is a 400.",
         accepted={"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
         refused={"output_config": {"format": {"type": "json_schema",
                                               "schema": {"type": "nosuch"}}}},
         param="output_config.format.schema"),
    _row("output_config.effort", MESSAGES, "rejected", "No reasoning controls.",
         refused={"output_config": {"effort": "high"}}),
    _row("metadata", MESSAGES, "ignored", "Informational.",
         accepted={"metadata": {"user_id": "u"}}),
    _row("service_tier", MESSAGES, "ignored", "One tier.", accepted={"service_tier": "auto"}),
    _row("cache_control", MESSAGES, "ignored", "Prefix caching is automatic (on blocks too).",
         accepted={"cache_control": {"type": "ephemeral"}}),
    _row("speed", MESSAGES, "ignored", "One speed.", accepted={"speed": "fast"}),
    _row("inference_geo", MESSAGES, "ignored", "One place.", accepted={"inference_geo": "us"}),
    _rejected("thinking", MESSAGES, "No extended thinking; ``{\"type\": \"disabled\"}`` passes.",
              {"type": "enabled", "budget_tokens": 1024}, allowed=(None, {"type": "disabled"})),
    _rejected("container", MESSAGES, "No code execution containers.", "c1"),
    _rejected("mcp_servers", MESSAGES, "No MCP connector.", [{"type": "url", "url": "x"}]),
    _rejected("context_management", MESSAGES, "Not supported.", {"edits": []}),
]
