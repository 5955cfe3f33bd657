"""The rows of the request-field table (see ``field_table``): OpenAI's chat and completions fields,
then the extras. Fragments are merged into a minimal valid request of each endpoint."""

from __future__ import annotations

from typing import Any

BOTH = ("chat", "completions")
CHAT = ("chat",)
COMPLETIONS = ("completions",)
USER = {"role": "user", "content": "hi"}
IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
FILE = {"type": "file", "file": {"file_id": "file-1"}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def _row(name: str, endpoints: tuple, status: str, note: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "endpoints": endpoints, "status": status, "note": note, **kw}


def service_rows(endpoints: tuple) -> list[dict[str, Any]]:
    """The service fields OpenAI's generation endpoints share, each accepted and ignored."""
    return [
        _row("service_tier", endpoints, "ignored", "One tier.", accepted={"service_tier": "auto"}),
        _row("safety_identifier", endpoints, "ignored", "Informational.",
             accepted={"safety_identifier": "s"}),
        _row("prompt_cache_key", endpoints, "ignored", "Prefix caching is automatic.",
             accepted={"prompt_cache_key": "k"}),
        _row("prompt_cache_retention", endpoints, "ignored", "Prefix caching is automatic.",
             accepted={"prompt_cache_retention": "24h"}),
    ]


def _rejected(name: str, endpoints: tuple, note: str, value: Any, **kw: Any) -> dict[str, Any]:
    return _row(name, endpoints, "rejected", note, refused={name: value}, **kw)


ROWS: list[dict[str, Any]] = [
    # -- both endpoints ------------------------------------------------------------------------
    _row("model", BOTH, "supported", "The served model name, or an alias from "
         "MSTAR_SERVED_MODEL_NAMES, or a LoRA adapter's name (it selects the adapter: "
         "docs/lora.rst); may be omitted. Another name is a 404 ``model_not_found``.",
         accepted={}, refused={"model": "no-such-model"}, refused_status=404),
    _row("max_tokens", BOTH, "supported", "1 .. 2**31-1, and prompt + max_tokens <= "
         "max_model_len. Unset: up to max_model_len (chat), 16 (completions).",
         accepted={"max_tokens": 3}, refused={"max_tokens": "5"}),
    _row("temperature", BOTH, "supported", "0 .. 2; 0 is greedy.",
         accepted={"temperature": 0.5}, refused={"temperature": 2.5}),
    _row("top_p", BOTH, "supported", "(0, 1].", accepted={"top_p": 0.9}, refused={"top_p": 0}),
    _row("n", BOTH, "supported", "1 .. 128 choices.", accepted={"n": 2}, refused={"n": 0}),
    _row("seed", BOTH, "supported", "0 .. 2**64-1; choice i uses seed + i.",
         accepted={"seed": 7}, refused={"seed": -1}),
    _row("stop", BOTH, "supported", "A string or a list of non-empty strings.",
         accepted={"stop": ["x"]}, refused={"stop": ""}),
    _row("stream", BOTH, "supported", "Server-sent events, ending with ``data: [DONE]``.",
         accepted={"stream": True}, refused={"stream": "abc"}),
    _row("stream_options.include_usage", BOTH, "supported", "A last chunk with the usage.",
         accepted={"stream": True, "stream_options": {"include_usage": True}},
         refused={"stream": True, "stream_options": {"include_usage": "yes"}}),
    _row("stream_options.include_obfuscation", BOTH, "ignored", "Chunks are never padded.",
         accepted={"stream": True, "stream_options": {"include_obfuscation": True}}),
    _row("presence_penalty", BOTH, "supported", "-2 .. 2, OpenAI's semantics.",
         accepted={"presence_penalty": 0.5}, refused={"presence_penalty": 3}),
    _row("frequency_penalty", BOTH, "supported", "-2 .. 2, OpenAI's semantics.",
         accepted={"frequency_penalty": 0.5}, refused={"frequency_penalty": -3}),
    _row("logit_bias", BOTH, "supported", "Token id (a string) -> -100 .. 100; an id outside the "
         "vocabulary is a 400 naming it.", accepted={"logit_bias": {"5": 10}},
         refused={"logit_bias": {"5": 101}}, param="logit_bias.5"),
    _row("user", BOTH, "ignored", "Informational.", accepted={"user": "u-1"},
         refused={"user": 5}),
    _row("response_format", CHAT, "supported", "``text``, ``json_object``, ``json_schema`` "
         "(structured output). An invalid schema is a 400 naming it.",
         accepted={"response_format": {"type": "json_schema",
                                       "json_schema": {"name": "a", "schema": SCHEMA}}},
         refused={"response_format": {"type": "json_schema", "json_schema": {
             "name": "a", "schema": {"type": "nosuch"}}}},
         param="response_format.json_schema.schema"),
    _row("keep_alive", BOTH, "supported", "Extension (Ollama's): with several models "
         "(MSTAR_MODELS, docs/models_many.rst), how long this request's model stays loaded once "
         "idle: seconds, or a duration such as ``5m``; negative: never unloaded. One model: "
         "ignored.", accepted={"keep_alive": "5m"}, refused={"keep_alive": "soon"}),
    # -- chat ----------------------------------------------------------------------------------
    _row("messages", CHAT, "supported", "At least one; roles system, developer, user, assistant.",
         accepted={"messages": [USER]}, refused={"messages": []}),
    _row("messages.*.content", CHAT, "supported", "A string, or a list of ``text`` parts.",
         accepted={"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
         refused={"messages": [{"role": "user", "content": 5}]}, param="messages.0.content"),
    _row("messages.*.content (image_url part)", CHAT, "rejected", "A text-only model (such as "
         "the built-in one) refuses it; a vision-language model takes it (see Multimodal).",
         refused={"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                            IMAGE]}]},
         param="messages.0.content.1"),
    _row("messages.*.content (input_audio part)", CHAT, "rejected", "``{\"data\": base64, "
         "\"format\": \"wav\"}`` (wav, mp3, flac, ogg, opus). A model without audio (such as "
         "the built-in one) refuses it; an audio-in model (Qwen2-Audio, Voxtral) takes it within "
         "the MSTAR_MAX_AUDIO_* bounds, each bad part a 4xx naming it.",
         refused={"messages": [{"role": "user", "content": [AUDIO]}]},
         param="messages.0.content.0"),
    _row("messages.*.content (file part)", CHAT, "rejected", "The models take text only.",
         refused={"messages": [{"role": "user", "content": [FILE]}]},
         param="messages.0.content.0"),
    _row("messages.*.name", CHAT, "tool calling", "Passed to the chat template.",
         accepted={"messages": [{**USER, "name": "ann"}]}),
    _row("messages.*.tool_calls", CHAT, "tool calling", "An assistant turn's tool calls.",
         accepted={"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "c1", "content": "1"}]}),
    _row("max_completion_tokens", CHAT, "supported", "Wins over max_tokens.",
         accepted={"max_completion_tokens": 3}, refused={"max_completion_tokens": 0}),
    _row("logprobs", CHAT, "supported", "Log-probabilities of the sampled tokens, taken from the "
         "model's distribution before penalties, logit_bias, a grammar's mask and temperature.",
         accepted={"logprobs": True}, refused={"logprobs": "yes"}),
    _row("top_logprobs", CHAT, "supported", "0 .. 20; needs ``logprobs: true``.",
         accepted={"logprobs": True, "top_logprobs": 2}, refused={"top_logprobs": 2}),
    _row("tools", CHAT, "tool calling", "Shown to the model: docs/tool_calling.rst.",
         accepted={"tools": [TOOL]}),
    _row("tool_choice", CHAT, "tool calling", "auto, none, required or a named function.",
         accepted={"tools": [TOOL], "tool_choice": "none"}),
    _row("parallel_tool_calls", CHAT, "tool calling", "", accepted={"parallel_tool_calls": True}),
    _rejected("functions", CHAT, "Deprecated by OpenAI: use tools.", [TOOL["function"]]),
    _rejected("function_call", CHAT, "Deprecated by OpenAI: use tool_choice.", "auto"),
    _row("modalities", CHAT, "supported", "``[\"text\"]`` or ``[\"text\", \"audio\"]``: the "
         "reply spoken too (needs ``audio``; ``n`` 1), as ``message.audio`` or ``delta.audio`` "
         "(docs/speech.rst). A 400 naming it from a model whose graph emits no audio.",
         accepted={"modalities": ["text"]}, refused={"modalities": ["text", "audio"],
                                                     "audio": {"voice": "ethan", "format": "wav"}}),
    _row("audio", CHAT, "supported", "``{voice, format}`` of a spoken reply: a voice of the "
         "model (else a 400 naming ``audio.voice``), wav, mp3, flac, opus or pcm16 (pcm16 only "
         "streamed, else a 400 naming ``stream``; aac a 400 naming ``audio.format``). Needs "
         "``\"audio\"`` in modalities.", refused={"audio": {"voice": "ethan", "format": "wav"}}),
    _rejected("prediction", CHAT, "No predicted outputs.", {"type": "content", "content": "x"}),
    _row("reasoning_effort", CHAT, "supported", "none .. xhigh, mapped to the chat template's "
         "reasoning switch (docs/reasoning.rst); a 400 when the model's template has none.",
         refused={"reasoning_effort": "low"}),
    _row("chat_template_kwargs", CHAT, "extra", "``enable_thinking``: the template's thinking "
         "switch (docs/reasoning.rst); a 400 naming it when the template has none.",
         accepted={"chat_template_kwargs": {}},
         refused={"chat_template_kwargs": {"enable_thinking": True}},
         param="chat_template_kwargs.enable_thinking"),
    _rejected("verbosity", CHAT, "Not supported.", "low"),
    _rejected("web_search_options", CHAT, "No web search.", {}),
    _rejected("store", CHAT, "Nothing is stored; ``false`` passes.", True, allowed=(None, False)),
    _row("metadata", CHAT, "ignored", "Nothing is stored.", accepted={"metadata": {"k": "v"}},
         refused={"metadata": {"k": 1}}, param="metadata.k"),
    *service_rows(CHAT),
    # -- completions ---------------------------------------------------------------------------
    _row("prompt", COMPLETIONS, "supported", "A string, a list of strings, a list of token ids "
         "or a list of token-id lists: one choice per prompt and n (index = prompt * n + i).",
         accepted={"prompt": ["a", "b"]}, refused={"prompt": []}),
    _row("echo", COMPLETIONS, "supported", "The prompt's text before the completion (not with "
         "logprobs).", accepted={"echo": True}, refused={"echo": "yes"}),
    _row("logprobs", COMPLETIONS, "supported", "0 .. 20 alternatives per token; taken before "
         "penalties, logit_bias, a grammar's mask and temperature.", accepted={"logprobs": 2},
         refused={"logprobs": 21}),
    _rejected("best_of", COMPLETIONS, "Server-side best-of is not offered; 1 passes.", 2,
              allowed=(None, 1)),
    _rejected("suffix", COMPLETIONS, "No insertion (fill-in-the-middle).", "x",
              allowed=(None, "")),
    _row("response_format", COMPLETIONS, "extra", "As for chat.",
         accepted={"response_format": {"type": "json_object"}},
         refused={"response_format": {"type": "xml"}}, param="response_format.type"),
    # -- extras (vLLM's names) -----------------------------------------------------------------
    _row("top_k", BOTH, "extra", "-1 (off) or >= 1.", accepted={"top_k": 5},
         refused={"top_k": -2}),
    _row("min_p", BOTH, "extra", "0 .. 1.", accepted={"min_p": 0.1}, refused={"min_p": 2}),
    _row("repetition_penalty", BOTH, "extra", "> 0 (1 is off), applied before the presence and "
         "frequency penalties.", accepted={"repetition_penalty": 1.1},
         refused={"repetition_penalty": 0}),
    _row("ignore_eos", BOTH, "extra", "Keep generating past end-of-sequence.",
         accepted={"ignore_eos": True}, refused={"ignore_eos": "x"}),
    _row("min_tokens", BOTH, "extra", "End-of-sequence and stop_token_ids are masked until this "
         "many tokens are out; <= max_tokens.", accepted={"min_tokens": 1, "max_tokens": 2},
         refused={"min_tokens": 5, "max_tokens": 2}),
    _row("stop_token_ids", BOTH, "extra", "Token ids that end the output.",
         accepted={"stop_token_ids": [5]}, refused={"stop_token_ids": [-1]},
         param="stop_token_ids.0"),
    _row("guided_json", BOTH, "extra", "A JSON schema (object or JSON text) the output follows.",
         accepted={"guided_json": SCHEMA}, refused={"guided_json": {"type": "nosuch"}}),
    _row("guided_regex", BOTH, "extra", "A regular expression the output matches.",
         accepted={"guided_regex": "[a-z]+"}, refused={"guided_regex": "("}),
    _row("guided_choice", BOTH, "extra", "The output is one of these strings.",
         accepted={"guided_choice": ["yes", "no"]}, refused={"guided_choice": []}),
    _row("guided_grammar", BOTH, "extra", "An EBNF grammar (xgrammar's dialect).",
         accepted={"guided_grammar": 'root ::= "a" | "b"'}, refused={"guided_grammar": "root ::="}),
]
