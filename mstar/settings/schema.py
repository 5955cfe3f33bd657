"""The one place every ``MSTAR_*`` knob is declared.

Each field is a knob: its environment name is ``MSTAR_`` + the upper-cased field name. Type, default,
bounds (``ge``/``gt``/``le``), unit, category and description live on the field, and everything else
(parsing, the CLI, ``mstar config show``, the generated docs) is derived from them. To add a knob, add a
field to the right group below and run ``mstar config docs``.

``WorkerSettings`` never reads the environment itself: ``mstar.settings.sources.load_settings`` does that
once, applying the lenient rules, and passes the parsed values in. Direct construction
(``WorkerSettings(kv_block_size=4)``) is for tests and embedding.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "MSTAR_"
BUILTIN_MODEL = "SmolLM2-135M-Instruct"
# Longest wait threading primitives accept; waits beyond it raise OverflowError.
MAX_WAIT_S = threading.TIMEOUT_MAX
MAX_WAIT_MS = threading.TIMEOUT_MAX * 1000.0
# Upper bound for counts, so that a typo such as 10**20 cannot reach torch or the allocator.
MAX_COUNT = 2**31 - 1
# What MSTAR_MAX_CONSECUTIVE_SPEC_STEPS=auto picks, by device (resolved by the engine).
SERIAL_ON_CPU = 0
OVERLAP_CAP_ON_CUDA = 1024
PLANNING_THREAD_GONE = "0.1.0 (steps are scheduled from values; no planning thread)"
CUDA_GRAPHS_GONE = "0.1.0 (the unwired CUDA-graph runner was deleted)"


def knob(default: Any, description: str, *, category: str, unit: str | None = None,
         secret: bool = False, security: bool = False, no_effect: str | None = None,
         **bounds: Any) -> Any:
    """A field with the metadata every consumer of the schema relies on.

    ``secret`` masks the value wherever it is shown. ``security`` marks a knob whose lenient
    fallback could weaken security: every problem with it (a malformed or empty value, a near-miss
    name) is an error in every mode. ``no_effect``: the knob no longer does anything; the text
    says since when and why. It still parses (old env files keep working), setting it warns
    "MSTAR_X has no effect since ...", and ``mstar config show`` marks it.
    """
    extra = {"unit": unit, "category": category, "secret": secret, "security": security,
             "no_effect": no_effect}
    return Field(default, description=description, json_schema_extra=extra, **bounds)


_loop = functools.partial(knob, category="Worker loop")
_server = functools.partial(knob, category="Server")
_engine = functools.partial(knob, category="Model and engine")
_transport = functools.partial(knob, category="Transport")
_config = functools.partial(knob, category="Config behaviour")
_limits = functools.partial(knob, category="Request limits")
_media = functools.partial(knob, category="Images")
_speculative = functools.partial(knob, category="Speculative decoding")


class WorkerLoopKnobs(BaseModel):
    launch_wait_ms: float = _loop(
        5.0, "After submitting step N+1, how long the main thread waits for the forward-launch "
        "event before going on (a GIL throttle meant to expire early).",
        unit="ms", ge=0.0, le=MAX_WAIT_MS)
    max_consecutive_spec_steps: Annotated[int, Field(ge=0, le=MAX_COUNT)] | Literal["auto"] = _loop(
        "auto", "Speculative steps in a row before the engine takes a fresh batch from the "
        "scheduler. A speculative step is the overlapped next step (N+1 planned while N runs), not "
        "speculative decoding. 0 turns the overlap off (a serial loop) and warns at startup. "
        f"auto = {SERIAL_ON_CPU} on CPU (the overlap costs more than it hides there; see "
        f"docs/worker_loop.rst) and {OVERLAP_CAP_ON_CUDA} on CUDA.")
    spec_peek_for_fairness: bool = _loop(
        True, "Yield to the scheduler early when other work (a waiting or preempted request) "
        "could be admitted now.")
    pre_plan_spec: bool = _loop(
        True, "Was: build step N+1's input tensors and block tables on a separate planning "
        "thread. The model runner now builds them from its persistent batch on the forward "
        "thread.", no_effect=PLANNING_THREAD_GONE)
    spec_yield_hold_ms: float = _loop(
        0.0, "How long other work must stay ready before a speculating worker yields to it.",
        unit="ms", ge=0.0, le=MAX_WAIT_MS)
    py_switch_interval_sec: float | None = _loop(
        None, "Python thread switch interval applied when the worker starts (sys.setswitchinterval). "
        "Unset keeps the interpreter default.", unit="s", gt=0.0, le=MAX_WAIT_S)
    recompile_limit: int = _loop(
        84, "torch.compile recompile limit, applied whenever compilation is on.", ge=8, le=1024)
    engine_step_sync: bool = _loop(
        False, "Wait for each step to finish before building the next (an A/B switch for the "
        "overlapped loop).")
    phase_timing: int = _loop(
        0, "Every N iterations, log p50/p95/mean of each loop phase. 0 turns it off.",
        unit="iterations", ge=0, le=MAX_COUNT)


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
        600.0, "A request running longer is aborted in the worker and fails for the client.",
        unit="s", gt=0.0, le=MAX_WAIT_S)
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
        "previous_response_id); when full, the least recently used goes. 0 stores nothing.",
        unit="responses", ge=0, le=MAX_COUNT)
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
    log_level: Literal["debug", "info", "warning", "error"] = _server("info", "Log level.")
    log_format: Literal["console", "json"] = _server(
        "console", "Log format: human-readable console lines or one JSON object per line.")
    # Request limits: each one a request passes is a 400 naming the field.
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
        64, "Most entries of 'stop' in one request.", unit="strings", ge=1, le=MAX_COUNT)
    max_logit_bias_entries: int = _limits(
        1024, "Most entries of 'logit_bias' in one request.", unit="entries", ge=1,
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


class EngineKnobs(BaseModel):
    model: str = _engine(
        BUILTIN_MODEL, f"Model to serve: '{BUILTIN_MODEL}' (the built-in model) or a local "
        "HF-format directory (config.json, *.safetensors, tokenizer files) or a .gguf file.")
    cache_dir: Path = _engine(
        Path("~/.cache/mstar").expanduser(), "Where the built-in model is converted to.")
    verify_cache: bool = _engine(
        False, "At start, hash the converted built-in model and compare it with the hashes "
        "recorded at conversion (file sizes are always checked; hashes also after an unfinished "
        "conversion). A mismatch converts the model again.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _engine(
        "auto", "Weight and activation dtype. auto = bfloat16 on CUDA and on CPUs with native bf16 "
        "(avx512_bf16 or AMX), else float32.")
    device: Literal["auto", "cpu", "cuda"] = _engine(
        "auto", "Device to run on. auto = cuda when available, else cpu.")
    max_model_len: int | None = _engine(
        None, "Longest sequence (prompt + output). Unset = the model's own limit.",
        unit="tokens", ge=1, le=MAX_COUNT)
    max_num_seqs: int = _engine(256, "Most sequences in one batch.", unit="sequences", ge=1,
                               le=MAX_COUNT)
    max_num_batched_tokens: int = _engine(
        8192, "Token budget of one step (prefill chunks plus decodes).", unit="tokens", ge=1,
        le=MAX_COUNT)
    kv_block_size: int = _engine(16, "Tokens per KV-cache block.", unit="tokens", ge=1, le=1024)
    num_kv_blocks: int | None = _engine(
        None, "KV-cache blocks to allocate. Unset = sized from MSTAR_KV_CACHE_MEMORY_FRACTION "
        "(CUDA) or MSTAR_CPU_KV_CACHE_GB (CPU).", unit="blocks", ge=1, le=MAX_COUNT)
    kv_cache_memory_fraction: float = _engine(
        0.9, "Fraction of free accelerator memory given to the KV cache when "
        "MSTAR_NUM_KV_BLOCKS is unset.", ge=0.01, le=1.0)
    cpu_kv_cache_gb: float = _engine(
        2.0, "KV-cache budget on CPU when MSTAR_NUM_KV_BLOCKS is unset.", unit="GiB",
        gt=0.0, le=1e6)
    enable_prefix_caching: bool = _engine(True, "Reuse KV-cache blocks of identical prompt prefixes.")
    attention_backend: Literal["auto", "torch", "triton"] = _engine(
        "auto", "Attention kernels: torch (SDPA over gathered pages) or triton (paged kernels reading "
        "the cache in place; needs CUDA and the triton package). auto = triton on CUDA, else torch.")
    cuda_graph: bool = _engine(
        True, "Was: capture the decode forward as CUDA graphs. The capture runner was never wired "
        "into the model runner and is gone.", no_effect=CUDA_GRAPHS_GONE)
    cuda_graph_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_COUNT)]] | None = _engine(
        None, "Was: the decode batch sizes to capture CUDA graphs for, a comma list.",
        unit="sequences", no_effect=CUDA_GRAPHS_GONE)
    quantization: Literal["none", "int8", "q4"] = _engine(
        "none", "Weight-only quantization of the linear layers (CPU): int8 = per output channel, "
        "q4 = 4-bit groups of 32 with a scale and a minimum (GGUF Q4_1). The LM head is int8 in "
        "both. With the built-in model, q4 serves its shipped Q4_1 GGUF directly.")
    compile: bool = _engine(
        False, "Compile the model's MLPs with torch.compile (slower first start; "
        "MSTAR_RECOMPILE_LIMIT applies).")
    num_workers: int = _engine(
        1, "Engine replicas (each one a tensor-parallel group of MSTAR_TENSOR_PARALLEL_SIZE "
        "processes); requests go to the replica with the fewest outstanding.", ge=1, le=256)
    tensor_parallel_size: int = _engine(
        1, "Processes (ranks) one replica's model is split across: attention heads, MLP width and "
        "vocabulary are divided between them, over torch.distributed (NCCL on CUDA, gloo on CPU). "
        "Must divide the model's attention heads; see docs/distributed.rst.",
        unit="ranks", ge=1, le=64)
    device_ids: list[Annotated[int, Field(ge=0, le=MAX_COUNT)]] | None = _engine(
        None, "CUDA devices to place ranks on, a comma list: replica i's rank r goes to entry "
        "i * MSTAR_TENSOR_PARALLEL_SIZE + r (wrapping around, with a warning, when there are "
        "fewer entries than ranks). Unset = 0, 1, 2, ... No effect on CPU.")
    torch_num_threads: int = _engine(
        0, "Intra-op CPU threads of torch in each engine process (every worker, or the process "
        "running mstar.LLM). 0 keeps torch's default, one per core.", unit="threads", ge=0,
        le=1024)
    seed: int = _engine(0, "Seed for the engine's random state.", ge=0, le=2**63 - 1)


class SpeculativeKnobs(BaseModel):
    """Speculative decoding (proposed tokens verified in one forward): not the overlapped loop's
    "speculative step" (MSTAR_MAX_CONSECUTIVE_SPEC_STEPS), which is overlap scheduling."""

    speculative_method: Literal["none", "ngram", "draft", "mtp"] = _speculative(
        "none", "Speculative decoding: how draft tokens are proposed before one forward verifies "
        "them all. ngram = prompt lookup over the request's own prompt and output. draft and mtp "
        "are not implemented yet (a warning, then none; an error in strict mode). Runs in the "
        "serial loop only: an overlap cap above 0 (MSTAR_MAX_CONSECUTIVE_SPEC_STEPS) turns it off "
        "with a warning. See docs/engine.rst.")
    num_speculative_tokens: int = _speculative(
        4, "Most draft tokens proposed for a request in one step.", unit="tokens", ge=1, le=64)
    ngram_min_n: int = _speculative(
        2, "ngram proposer: the shortest suffix of a request's tokens looked up in its earlier "
        "tokens.", unit="tokens", ge=1, le=64)
    ngram_max_n: int = _speculative(
        4, "ngram proposer: the longest suffix looked up (tried first).", unit="tokens", ge=1,
        le=64)
    speculative_min_acceptance: float = _speculative(
        0.3, "A request stops speculating once its accepted share of the draft tokens proposed "
        "for it falls below this (checked after MSTAR_NUM_SPECULATIVE_TOKENS * 4 proposed). 0 "
        "never stops.", ge=0.0, le=1.0)


class TransportKnobs(BaseModel):
    zmq_transport: Literal["ipc", "tcp"] = _transport(
        "ipc", "How processes talk: ipc sockets in MSTAR_SOCKET_DIR, or tcp.")
    zmq_tcp_host: str = _transport("127.0.0.1", "Host for tcp transport.")
    zmq_tcp_base_port: int = _transport(
        29500, "First port for tcp transport; each socket takes the next one.", ge=1024, le=65000)
    dist_master_addr: str = _transport(
        "127.0.0.1", "Address of the torch.distributed rendezvous of a tensor-parallel group "
        "(rank 0's host; every rank must reach it).")
    dist_master_port: int = _transport(
        0, "Port of the rendezvous of replica 0; replica i uses this + i. 0 = a free port picked "
        "at start (one host only).", ge=0, le=65535)
    remote_workers: int = _transport(
        0, "How many of the MSTAR_NUM_WORKERS replicas join from other hosts (`mstar worker "
        "--conductor tcp://HOST:PORT --replica I`) instead of being started by the conductor: "
        "the last ones. Needs the tcp transport (MSTAR_ZMQ_TRANSPORT=tcp).", ge=0, le=256)
    socket_dir: Path | None = _transport(
        None, "Directory for ipc sockets. Unset = a fresh private directory per instance.")
    cluster_secret: SecretStr | None = _transport(
        None, "The secret every process of the cluster holds: over tcp, the ZeroMQ CURVE keys "
        "that encrypt and authenticate all traffic are derived from it, and a peer without it "
        "cannot connect. Required with MSTAR_REMOTE_WORKERS (the same on every host); unset "
        "with tcp on one host, a random secret is made per instance. Not used by the ipc "
        "transport. A security setting: any problem with it is an error.",
        secret=True, security=True)
    max_message_mb: float = _transport(
        64.0, "Largest message between processes. A larger frame is dropped (and counted) by its "
        "receiver, and a larger message is never sent: the request that would need it fails.",
        unit="MiB", gt=0.0, le=2047.0)


class MediaKnobs(BaseModel):
    allowed_media_domains: str | None = _media(
        None, "Host names (a comma list, matched exactly) whose http(s) image URLs the server "
        "fetches. Unset: none, so only data: URLs are taken (a remote URL is a 400); file: URLs "
        "never are. A security setting: any problem with it is an error.", security=True)
    max_images_per_request: int = _media(
        8, "Images one chat request may carry; more are a 400 naming the first part over it.",
        unit="images", ge=0, le=1024)
    max_image_pixels: int = _media(
        16_777_216, "Largest image (width x height) accepted, read from the file header before "
        "decoding (a decompression bomb is refused unread): larger is a 413 naming the part.",
        unit="pixels", ge=1, le=2**40)
    max_image_bytes: int = _media(
        20_971_520, "Largest image file (after base64 decoding, or as fetched): larger is a 413 "
        "naming the part.", unit="bytes", ge=1, le=2**34)
    max_encoder_tokens_per_step: int = _media(
        8192, "Image embedding rows (placeholder tokens) the vision encoder may produce in one "
        "engine step; an image larger than this alone still runs, in a step of its own.",
        unit="tokens", ge=1, le=MAX_COUNT)
    encoder_cache_mb: float = _media(
        256.0, "Memory for cached vision-encoder outputs, keyed by image content: a repeated "
        "image is encoded once while its output stays here. 0 turns the cache off.",
        unit="MiB", ge=0.0, le=1e7)


class ConfigKnobs(BaseModel):
    config_strictness: Literal["warn", "strict"] = _config(
        "warn", "warn: bad values warn and fall back. strict: every problem is an error and "
        "nothing starts.")


class WorkerSettings(BaseSettings, WorkerLoopKnobs, ServerKnobs, EngineKnobs, SpeculativeKnobs,
                     TransportKnobs, MediaKnobs, ConfigKnobs):
    """Every knob, frozen. Built once per process tree and passed down explicitly."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        # Only explicit values: the environment is read once, by load_settings, with provenance.
        return (init_settings,)

    def fingerprint(self) -> str:
        """A short hash of every effective value, to check that processes agree.

        Secrets count only as set or unset (the JSON dump masks them): the fingerprint is sent to
        every client, and a hash of a key would let anyone test guesses of it offline.
        """
        values = self.model_dump(mode="json")
        return hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16]


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()
