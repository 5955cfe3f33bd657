"""The model and the engine: what to load, on what, with how much cache."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr

from mstar.settings.knobs.field import MAX_COUNT, _engine

BUILTIN_MODEL = "SmolLM2-135M-Instruct"
CUDA_GRAPHS_GONE = "0.1.0 (the unwired CUDA-graph runner was deleted)"
# What MSTAR_MAX_PREFILL_CHUNK_TOKENS=auto picks on CPU (on CUDA: no cap beyond the step budget).
PREFILL_CHUNK_ON_CPU = 256
# What MSTAR_PREFILL_SHARE_BESIDE_DECODES=auto picks on CPU (on CUDA: 0, off).
PREFILL_SHARE_ON_CPU = 0.3


class EngineKnobs(BaseModel):
    model: str = _engine(
        BUILTIN_MODEL, f"Model to serve: '{BUILTIN_MODEL}' (the built-in model) or a local "
        "HF-format directory (config.json, *.safetensors, tokenizer files) or a .gguf file.")
    cache_dir: Path = _engine(
        Path("~/.cache/mstar").expanduser(), "Where the built-in model is converted to, the "
        "native kernels are built and a GGUF's tensors are kept after their first read.")
    verify_cache: bool = _engine(
        False, "At start, hash the converted built-in model and compare it with the hashes "
        "recorded at conversion (file sizes are always checked; hashes also after an unfinished "
        "conversion). A mismatch converts the model again.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _engine(
        "auto", "Weight and activation dtype. auto = bfloat16 on CUDA, on CPUs with native bf16 "
        "(avx512_bf16 or AMX), and on AVX2 CPUs where mstar's bf16-weight kernel builds (bf16 "
        "weights, float32 arithmetic; see docs/engine.rst); float32 on every CPU with "
        "quantized weights (MSTAR_QUANTIZATION int8, q4, or auto on a model that ships them: "
        "their kernels take float32 activations); else float32.")
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
    max_prefill_chunk_tokens: Annotated[int, Field(ge=1, le=MAX_COUNT)] | Literal["auto"] = _engine(
        "auto", "Most prompt tokens one request computes in a step, generation and pooling "
        "(embeddings) prompts alike: a long prompt is prefilled in chunks of at most this many, "
        "so the requests beside it keep decoding and new ones are admitted between its chunks "
        "instead of waiting for its whole prompt. A chunk is never cut inside an image run that "
        "must run whole. auto = " + str(PREFILL_CHUNK_ON_CPU) + " on CPU (where a step of "
        "thousands of prompt tokens holds the worker for seconds) and no cap beyond "
        "MSTAR_MAX_NUM_BATCHED_TOKENS on CUDA.", unit="tokens")
    prefill_share_beside_decodes: Annotated[float, Field(ge=0.0, le=64.0)] | Literal["auto"] = (
        _engine("auto", "While other requests decode (or a short prompt waits to be admitted), "
                "the time a prompt already being prefilled in chunks may take, as a fraction of "
                "the decoding rows' own step time: its chunks are sized from a fit of step cost "
                "learnt online (a chunk at long context costs far more than a decode step), so a "
                "decode beside a long prompt (an 8192-token embedding, say) takes at most about "
                "1 + this times as long as alone. With nothing decoding, prompts run at full "
                "speed (MSTAR_MAX_PREFILL_CHUNK_TOKENS only). 0 turns the rule off. auto = "
                + str(PREFILL_SHARE_ON_CPU) + " on CPU and 0 on CUDA (where a chunk's step is "
                "short). Not reloadable.", unit="share"))
    kv_block_size: int = _engine(16, "Tokens per KV-cache block.", unit="tokens", ge=1, le=1024)
    num_kv_blocks: int | None = _engine(
        None, "KV-cache blocks to allocate. Unset = sized from MSTAR_KV_CACHE_MEMORY_FRACTION "
        "(CUDA) or MSTAR_CPU_KV_CACHE_GB (CPU).", unit="blocks", ge=1, le=MAX_COUNT)
    talker_num_kv_blocks: int | None = _engine(
        None, "KV-cache blocks of a chained model's second language model (Qwen3-Omni's "
        "talker, its own cache beside the thinker's; docs/speech.rst). Unset = sized as "
        "MSTAR_NUM_KV_BLOCKS is (so on CUDA set it, or the thinker's cache takes its share of "
        "free memory first).", unit="blocks", ge=1, le=MAX_COUNT)
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
    quantization: Literal["auto", "none", "int8", "q4"] = _engine(
        "auto", "Weight-only quantization of the linear layers (CPU): int8 = per output channel, "
        "q4 = 4-bit groups of 32 with a scale and a minimum (GGUF Q4_1). The LM head is int8 in "
        "both. With the built-in model, q4 serves its shipped Q4_1 GGUF directly. auto = a model "
        "whose weights ship quantized (the built-in model, a GGUF) is served at that precision on "
        "CPU when MSTAR_DTYPE is auto, without tensor parallelism or LoRA: its Q4/Q8 blocks for "
        "the decode rows and, on CPUs with native bf16, oneDNN's bf16 copy of them for wider "
        "batches (held twice: about 2.6 bytes a weight); every other model none. See "
        "docs/engine.rst, \"Shipped precision\".")
    kv_cache_dtype: Literal["auto", "float32", "bfloat16"] = _engine(
        "auto", "Dtype of the KV cache on CPU. auto = bfloat16 where the linears are quantized "
        "(MSTAR_QUANTIZATION int8, q4, or auto on a model that ships them) and the activations "
        "are float32 on a CPU with native bf16 (avx512_bf16 or AMX): decode attention reads half "
        "the bytes, in float32 arithmetic; else the activations' dtype. bfloat16 under "
        "bfloat16 or float32 activations; float32 only under float32 activations. On CUDA the "
        "cache takes the activations' dtype and this knob does nothing (a warning says so). See "
        "docs/engine.rst, \"Decode at 32 streams\".")
    compile: bool = _engine(
        False, "Compile the model's MLPs with torch.compile (slower first start; "
        "MSTAR_RECOMPILE_LIMIT applies).")
    num_workers: int = _engine(
        1, "Engine replicas (each one a tensor-parallel group of MSTAR_TENSOR_PARALLEL_SIZE "
        "processes); MSTAR_ROUTE_POLICY chooses each request's replica.", ge=1, le=256)
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
    cpu_bind: bool = _engine(
        True, "When serving on CPU with one engine process (MSTAR_NUM_WORKERS=1, "
        "MSTAR_TENSOR_PARALLEL_SIZE=1, the mp executor, one model: MSTAR_MODELS unset, no GPU) "
        "on at least 2 CPUs: bind the worker's intra-op "
        "threads one per CPU, in the order of the CPUs `mstar serve` may use (MSTAR_TORCH_NUM_THREADS "
        "of them, 0: all), and the API server's threads and the worker's zmq I/O thread to one "
        "CPU, one the engine's threads leave free, else the last engine thread's (never the "
        "first's, which runs each step's Python). With every CPU busy in the engine's parallel "
        "regions, what the front runs then always displaces the same, last thread "
        "(docs/worker_loop.rst, 'Session 14'). Needs the native CPU kernels. No effect "
        "otherwise, nor on mstar.LLM.")
    hf_token: SecretStr | None = _engine(
        None, "Hugging Face access token for downloading a hub id's files (a gated or private "
        "model). Also read from HF_TOKEN (MSTAR_HF_TOKEN wins). Unset: huggingface_hub's stored "
        "login, if any.", secret=True)
    hf_home: Path | None = _engine(
        None, "Hugging Face's home: hub ids are downloaded to, and looked up in, its hub/ "
        "cache. Also read from HF_HOME. Unset: ~/.cache/huggingface.")
    hf_hub_offline: bool = _engine(
        False, "Serve hub ids from the cache only, never asking the hub; an id not cached is "
        "an error naming it and the cache directory. Also read from HF_HUB_OFFLINE.")
    hf_endpoint: str = _engine(
        "https://huggingface.co", "The Hugging Face hub hub ids are downloaded from (a mirror, "
        "or a local server). Also read from HF_ENDPOINT.")
    score_tokens: str | None = _engine(
        None, "Two tokens, a comma pair such as 'no,yes': the served causal LM scores (rerank, "
        "score, classify) with the logits of those tokens at the prompt's last position, as "
        "Qwen3-Reranker does: the score is the softmax probability of the second. Each must be "
        "one token of the model's tokenizer. Unset: only a *ForSequenceClassification model "
        "scores (docs/openai_api.rst).")
    seed: int = _engine(0, "Seed for the engine's random state.", ge=0, le=2**63 - 1)
    encoder_placement: str = _engine(
        "", "Where each placeable node of the model's walk graph runs: its encoder nodes "
        "(docs/multimodal.rst), its codec node and a chained walk's later language model, "
        "Qwen3-Omni's talker (docs/speech.rst). Comma-separated node=place, place 'worker' (in "
        "the language model's worker process, every node's default) or 'process' (a process of "
        "its own beside the worker, its inputs and outputs sent over the transport), e.g. "
        "audio_encoder=process, codec=process (CSM), code2wav=process or talker=process "
        "(Qwen3-Omni; the talker with its own engine and KV cache). A node the model's graph "
        "does not have, or cannot place, is a start-up error naming the nodes it can place.",
        max_length=1024)
