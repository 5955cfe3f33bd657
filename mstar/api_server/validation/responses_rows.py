"""The rows of the request-field table (see ``field_table``) for POST /v1/responses. Fragments
are merged into a minimal valid request ({"input": "hi"})."""

from __future__ import annotations

from typing import Any

from mstar.api_server.validation.field_rows import SCHEMA, _rejected, _row, service_rows

RESPONSES = ("responses",)
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
TEXT_PART = {"type": "input_text", "text": "hi"}

ROWS: list[dict[str, Any]] = [
    _row("model", RESPONSES, "supported", "As for chat.", accepted={},
         refused={"model": "no-such-model"}, refused_status=404),
    _row("input", RESPONSES, "supported", "A string (one user message) or a list of items: "
         "messages (roles user, assistant, system, developer; a string or text parts), "
         "``function_call`` and ``function_call_output`` items; ``reasoning`` items are not shown "
         "to the model. Other item types are a 400 naming ``input.N.type``.",
         accepted={"input": [{"role": "user", "content": [TEXT_PART]}]}, refused={"input": []}),
    _row("input.*.content (input_image, input_file part)", RESPONSES, "rejected",
         "The Responses API takes text and audio parts only.",
         refused={"input": [{"role": "user", "content": [{"type": "input_image",
                                                           "image_url": "x"}]}]},
         param="input.0.content.0"),
    _row("input.*.content (input_audio part)", RESPONSES, "supported", "``{\"input_audio\": "
         "{\"data\": base64, \"format\": \"wav\"}}``, as in chat, for an audio-in model "
         "(Qwen2-Audio, Voxtral); a model without audio (such as the built-in one) refuses it, "
         "a 400 naming the item.",
         refused={"input": [{"role": "user", "content": [
             {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]},
         param="input.0"),
    _row("instructions", RESPONSES, "supported", "A system message before the input; not carried "
         "over by ``previous_response_id``.", accepted={"instructions": "Be brief."},
         refused={"instructions": 5}),
    _row("previous_response_id", RESPONSES, "supported", "A stored response's input and output "
         "come before ``input``; unknown (or another key's, or expired) is a 404.",
         refused={"previous_response_id": "resp_nope"}, refused_status=404),
    _row("store", RESPONSES, "supported", "Default true: kept in memory for GET/DELETE "
         "``/v1/responses/{id}`` and ``previous_response_id`` (MSTAR_RESPONSES_STORE_*).",
         accepted={"store": False}, refused={"store": "yes"}),
    _row("tools", RESPONSES, "tool calling", "Function tools (``strict`` defaults to true, as "
         "OpenAI's); built-in tools (web_search, file_search, ...) are a 400.",
         accepted={"tools": [TOOL]}, refused={"tools": [{"type": "web_search"}]},
         param="tools.0.type"),
    _row("tool_choice", RESPONSES, "tool calling", "auto, none, required or "
         '``{"type": "function", "name": ...}``.',
         accepted={"tools": [TOOL], "tool_choice": "required"},
         refused={"tool_choice": "sometimes"}),
    _row("parallel_tool_calls", RESPONSES, "tool calling", "",
         accepted={"parallel_tool_calls": False}),
    _row("text", RESPONSES, "supported", "``format``: text, json_object or json_schema "
         "(structured output, as chat's response_format).",
         accepted={"text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}},
         refused={"text": {"format": {"type": "json_schema", "schema": {"type": "nosuch"}}}},
         param="text.format.schema"),
    _row("text.verbosity", RESPONSES, "rejected", "Not supported; ``\"medium\"`` passes.",
         refused={"text": {"verbosity": "low"}}),
    _row("max_output_tokens", RESPONSES, "supported", "As chat's max_completion_tokens.",
         accepted={"max_output_tokens": 3}, refused={"max_output_tokens": 0}),
    _row("temperature", RESPONSES, "supported", "0 .. 2.", accepted={"temperature": 0.5},
         refused={"temperature": 3}),
    _row("top_p", RESPONSES, "supported", "(0, 1].", accepted={"top_p": 0.5},
         refused={"top_p": 0}),
    _row("stream", RESPONSES, "supported", "Typed server-sent events, response.created .. "
         "response.completed.", accepted={"stream": True}, refused={"stream": "abc"}),
    _row("stream_options", RESPONSES, "ignored", "``include_obfuscation``: events are never "
         "padded.", accepted={"stream": True, "stream_options": {"include_obfuscation": True}}),
    _row("include", RESPONSES, "supported", "Only ``reasoning.encrypted_content`` (there is "
         "nothing to add: reasoning is never encrypted).",
         accepted={"include": ["reasoning.encrypted_content"]},
         refused={"include": ["message.output_text.logprobs"]}, param="include.0"),
    _rejected("truncation", RESPONSES, "Nothing is dropped to fit; ``\"disabled\"`` passes.",
              "auto", allowed=(None, "disabled")),
    _row("metadata", RESPONSES, "ignored", "Echoed in the response (and stored with it).",
         accepted={"metadata": {"k": "v"}}, refused={"metadata": {"k": 1}}, param="metadata.k"),
    _row("user", RESPONSES, "ignored", "Informational.", accepted={"user": "u"}),
    *service_rows(RESPONSES),
    _row("prompt_cache_options", RESPONSES, "ignored", "Prefix caching is automatic.",
         accepted={"prompt_cache_options": {"ttl": "30m"}}),
    _rejected("background", RESPONSES, "Every response runs in the foreground; ``false`` "
              "passes.", True, allowed=(None, False)),
    _rejected("conversation", RESPONSES, "No conversations API: use previous_response_id.",
              "conv_1"),
    _rejected("prompt", RESPONSES, "No stored prompt templates.", {"id": "pmpt_1"}),
    _rejected("reasoning", RESPONSES, "No reasoning controls.", {"effort": "high"}),
    _rejected("max_tool_calls", RESPONSES, "Not supported.", 3),
    _rejected("top_logprobs", RESPONSES, "No log-probabilities here (chat has them); 0 passes.",
              2, allowed=(None, 0)),
    _rejected("context_management", RESPONSES, "Not supported.", [{"type": "compaction"}]),
]
