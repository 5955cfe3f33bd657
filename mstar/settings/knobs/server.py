"""The API server: auth, timeouts, parsers, logging."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, SecretStr

from mstar.settings.knobs.field import MAX_COUNT, MAX_WAIT_S, _limits, _server


class ServerKnobs(BaseModel):
    host: str = _server("127.0.0.1", "Address the HTTP server binds to.")
    port: int = _server(8000, "Port the HTTP server binds to.", ge=1, le=65535)
    api_key: SecretStr | None = _server(
        None, "When set, every request except /health needs 'Authorization: Bearer <key>' (or "
        "'x-api-key: <key>'). "
        "Unset disables authentication. A security setting: any problem with it is an error.",
        secret=True, security=True)
    max_concurrent_requests: int = _server(
        256, "Requests in flight beyond this get an immediate 503 (health, models and metrics "
        "endpoints are not counted).", unit="requests", ge=1, le=MAX_COUNT)
    max_body_mb: float = _server(
        128.0, "Largest accepted request body; larger bodies get 413.", unit="MiB", gt=0.0, le=1e6)
    request_timeout_s: float = _server(
        600.0, "A request running longer (counted from its admission: fetching and decoding its "
        "images included, and a slow client's reading of its stream) is aborted in the worker "
        "at that moment and fails for the client with a 504 (a stream: a final error event).",
        unit="s", gt=0.0, le=MAX_WAIT_S)
    max_unread_output_kb: float = _server(
        1024.0, "Output one request may have generated that its client has not read yet (a slow "
        "reader of a stream); past it the request is aborted in the worker, its KV blocks freed, "
        "and its stream ends with an error event. Nothing more is buffered for it.",
        unit="KiB", gt=0.0, le=1e6)
    http_header_timeout_s: float = _server(
        10.0, "A connection whose request headers have not all arrived this long after it opened "
        "(or after its previous response) is closed, so idle or trickling connections cannot "
        "pile up. Not reloadable.", unit="s", gt=0.0, le=3600.0)
    playground: bool = _server(
        True, "Serve the browser playground at / (chat with the served model) and the "
        "operator's page at /operator (the running settings, /metrics as plots, health). The "
        "pages are static files that load without the API key; every API call they make needs "
        "it. Off: neither path is served. Not reloadable.")
    shutdown_timeout_s: float = _server(
        30.0, "On SIGINT/SIGTERM, how long in-flight requests may run before everything stops.",
        unit="s", ge=0.0, le=MAX_WAIT_S)
    startup_timeout_s: float = _server(
        600.0, "How long the conductor waits for every worker to finish loading.",
        unit="s", gt=0.0, le=MAX_WAIT_S)
    stream_interval: int = _server(
        1, "Tokens per streamed chunk: a choice's SSE event (or NDJSON line) goes out once it has "
        "this many new tokens, and when it finishes. 1 streams every token.", unit="tokens",
        ge=1, le=MAX_COUNT)
    unknown_request_fields: Literal["ignore", "warn", "reject"] = _server(
        "warn", "What a request field the API does not know gets: ignore; warn (logged once per "
        "field name, and listed in the response header X-Mstar-Ignored-Fields); or reject (a 400 "
        "naming each one, with a suggestion). Known but unsupported fields are always a 400.")
    served_model_names: str | None = _server(
        None, "Other names the served model answers to in a request's 'model' field, a comma "
        "list (e.g. 'gpt-4o-mini,default'); /v1/models lists them too. The served name (the "
        "model directory's name, or the built-in model's) and MSTAR_MODEL itself always work; "
        "any other name is a 404 model_not_found.")
    tool_call_parser: Literal["auto", "hermes", "llama3_json", "mistral", "pythonic",
                              "qwen3_coder"] = _server(
        "auto", "How tool calls are read from the model's output: hermes = "
        "<tool_call>{json}</tool_call> (Qwen2/Qwen3-style templates); llama3_json = a JSON "
        "object {name, parameters} as the reply (Llama 3.1/3.2); mistral = [TOOL_CALLS] then a "
        "JSON list or name[ARGS]{json}; pythonic = [f(a=1), g()] (Llama 3.2/4); qwen3_coder = "
        "<tool_call><function=f><parameter=a>..., XML (Qwen3-Coder). auto = chosen from the "
        "model's chat template (hermes when nothing else matches; docs/tool_calling.rst).")
    tool_call_undeclared: Literal["text", "drop"] = _server(
        "text", "What a parsed tool call to a function the request did not declare in 'tools' "
        "becomes (tool_choice auto): text = its markup stays in the message content; drop = it "
        "is removed from the reply. It is never returned as a tool call.")
    reasoning_parser: Literal["auto", "none", "think"] = _server(
        "auto", "How reasoning is split out of the model's output: think = <think>...</think> "
        "goes to the message's reasoning_content; none = all output is content. auto = think "
        "when the model's chat template writes <think>, else none (docs/reasoning.rst).")
    responses_store_capacity: int = _server(
        1024, "Responses kept in memory for /v1/responses' store (GET, DELETE, "
        "previous_response_id); when full, the oldest goes. 0 stores nothing. Not reloadable.",
        unit="responses", ge=0, le=MAX_COUNT)
    responses_store_max_mb: float = _server(
        256.0, "Memory the Responses store may hold (each response measured as the JSON it is "
        "kept as); past it the oldest responses go. One response larger than an eighth of it "
        "is returned but not stored. Input the model does not read (reasoning items, fields "
        "other than a message's role and text) is not kept. 0 stores nothing. Not reloadable.",
        unit="MiB", ge=0.0, le=1e6)
    responses_store_ttl_s: float = _server(
        3600.0, "How long a stored response is kept after it was created.", unit="s", gt=0.0,
        le=MAX_WAIT_S)
    responses_store_per_key: bool = _server(
        True, "A stored response is visible only to requests that present the API key (Bearer or "
        "x-api-key) that created it; off: to every client.")
    embedding_pooling: Literal["auto", "last", "mean"] = _server(
        "auto", "How /v1/embeddings reduces the final hidden states (after the final norm) to one "
        "vector: last = the last input token's; mean = the mean over every input token (no "
        "prefix-cache hits for such requests). auto = mean or last as the model directory's "
        "sentence-transformers Pooling config (modules.json, 1_Pooling/config.json) says, else "
        "last (docs/openai_api.rst).")
    embedding_max_inputs: int = _server(
        2048, "Most inputs in one /v1/embeddings request (OpenAI's limit is 2048); more is a 400 "
        "naming 'input'.", unit="inputs", ge=1, le=MAX_COUNT)
    score_template: Path | None = _server(
        None, "A text file: how /v1/rerank and /v1/score show a (query, document) pair to the "
        "model, with {query} and {document} where they go (e.g. Qwen3-Reranker's prompt; "
        "docs/openai_api.rst). Unset: the tokenizer's own pair encoding, as a cross-encoder "
        "is trained (query, then document).")
    cors_origins: str | None = _server(
        None, "Origins (a comma list of scheme://host[:port], matched exactly; * = any) whose web "
        "pages may call the API from a browser: their CORS preflight (OPTIONS) is answered and "
        "responses carry Access-Control-Allow-Origin. Unset: no CORS headers, so browsers keep "
        "other origins out. Not reloadable. A security setting: any problem with it is an error.",
        security=True)
    route_policy: Literal["prefix", "least_loaded"] = _server(
        "prefix", "Which replica (MSTAR_NUM_WORKERS) a new request goes to: prefix = the one this "
        "server last sent the longest prefix of its prompt to (whole MSTAR_KV_BLOCK_SIZE blocks), "
        "whose prefix cache most likely holds it, while MSTAR_ROUTE_MAX_IMBALANCE allows, else "
        "the least loaded; least_loaded = the one with the fewest live requests. One replica: "
        "no difference. Not reloadable (docs/distributed.rst).")
    route_max_imbalance: int = _server(
        8, "With MSTAR_ROUTE_POLICY=prefix: a replica takes a request for its cached prefix only "
        "while its live requests, counting the new one, exceed the least-loaded replica's by at "
        "most this many; past it the request goes to the least-loaded replica. 1 = only "
        "between equally loaded replicas. Not reloadable.", unit="requests", ge=1, le=MAX_COUNT)
    log_level: Literal["debug", "info", "warning", "error"] = _server("info", "Log level.")
    log_format: Literal["console", "json"] = _server(
        "console", "Log format: human-readable console lines or one JSON object per line.")


class RequestLimitKnobs(BaseModel):
    """Request limits: each one a request passes is a 400 naming the field."""

    grammar_max_schema_kb: float = _limits(
        64.0, "Largest structured-output constraint: a JSON schema (response_format, guided_json, "
        "a tool's parameters), a guided_grammar or the guided_choice list, as JSON text.",
        unit="KiB", gt=0.0, le=1e6)
    grammar_max_depth: int = _limits(
        64, "Deepest nesting of a JSON schema (each object or array level counts one).",
        unit="levels", ge=1, le=10_000)
    grammar_max_enum_entries: int = _limits(
        1024, "Most entries of one enum of a JSON schema, or of guided_choice.", unit="entries",
        ge=1, le=MAX_COUNT)
    grammar_max_regex_length: int = _limits(
        4096, "Longest guided_regex, and longest 'pattern' inside a JSON schema.",
        unit="characters", ge=1, le=MAX_COUNT)
    grammar_compile_timeout_s: float = _limits(
        20.0, "A request whose grammar has not compiled this long after it arrived at the worker "
        "(queueing included) fails with a 408; a compile not yet started is cancelled.",
        unit="s", gt=0.0, le=MAX_WAIT_S)
    grammar_cache_mb: float = _limits(
        512.0, "Memory the worker's cache of compiled grammars may hold (xgrammar's "
        "cache_limit_bytes); least recently used grammars are evicted past it.",
        unit="MiB", gt=0.0, le=1e6)
    max_stop_strings: int = _limits(
        64, "Most entries of 'stop' (the Messages API's 'stop_sequences') in one request.",
        unit="strings", ge=1, le=MAX_COUNT)
    max_logit_bias_entries: int = _limits(
        1024, "Most entries of 'logit_bias' in one request.", unit="entries", ge=1,
        le=MAX_COUNT)
    max_tools: int = _limits(
        1024, "Most entries of 'tools' in one request (chat, Responses, Messages).",
        unit="tools", ge=1, le=MAX_COUNT)
    max_messages: int = _limits(
        100_000, "Most messages in one request: chat's and the Messages API's 'messages', the "
        "Responses API's 'input' items, /tokenize's 'messages'.", unit="messages", ge=1,
        le=MAX_COUNT)
    max_prompt_chars: int = _limits(
        16_000_000, "Longest text one request has tokenized: a prompt (each one of a batch), an "
        "embeddings input, or a chat rendered with its template (/v1/chat/completions, "
        "/v1/responses, /v1/messages, /tokenize). Longer is a 413 naming the field, before any "
        "tokenizing.", unit="characters", ge=1, le=MAX_COUNT)
    special_tokens_in_content: Literal["escape", "reject"] = _limits(
        "escape", "Special-token text (e.g. ``<|im_start|>``) typed inside a chat message's content "
        "(system, user, assistant or tool): escape = tokenized as the plain text it is, never "
        "as the special token; reject = a 400 naming the message.")
