"""LLMEngine: requests in, per-step token deltas out, through the one step loop.

The engine deals in token ids only: text, stop strings and logprob formatting are the caller's
(``mstar.output``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import structlog
import torch
from transformers import AutoConfig, AutoTokenizer

from mstar.engine.engine_stats import EngineStats
from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.kv.state_cache import StateSlots
from mstar.engine.model_facts import eos_token_ids, model_max_len
from mstar.engine.placement import resolve_device_dtype
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import (
    check_image_runs_fit,
    check_logit_bias_ids,
    check_pooled_prompt_fits,
    check_request_fits,
)
from mstar.engine.request.outputs import RequestOutput, finish_reason
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence, SequenceStatus
from mstar.engine.request.walks import check_feed, part_nodes
from mstar.engine.runner.model_runner import ModelRunner
from mstar.engine.runner.pooling import model_pooling
from mstar.engine.runner.thinker_rows import with_rows
from mstar.engine.sampling.state import new_sampling_state
from mstar.engine.schedule.overlap_policy import OverlapPolicy
from mstar.engine.schedule.prefill_chunk import prefill_cap
from mstar.engine.schedule.prefill_share import PrefillShare, prefill_share
from mstar.engine.schedule.priority import NORMAL
from mstar.engine.schedule.scheduler import Scheduler
from mstar.engine.schedule.scheduler_output import EncoderCounts, RunnerOutput, SchedulerOutput
from mstar.engine.speculative.drafting import NO_DRAFTS
from mstar.engine.speculative.setup import speculation_for, speculative_method
from mstar.engine.step_loop import StepLoop
from mstar.engine.structured.grammar_pool import GrammarBounds, GrammarCompilePool
from mstar.kernels.cpu.affinity import intra_op_binder
from mstar.models.families.parallel import TensorParallel
from mstar.models.loading.registry import node_config
from mstar.models.loading.resolve import resolve_model_dir
from mstar.models.media_part import MediaPart
from mstar.models.speech.row_feed import RowFeed
from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)

GRAMMAR_WAIT_S = 0.02  # longest block on compiling grammars when nothing else can run

class LLMEngine:
    """Owns the model, the KV cache, the scheduler and the requests; ``step()`` runs the step loop
    (serial or overlapped, as the settings say) and returns the outputs of the step that finished.

    ``timer_label`` tags phase-timing logs (the worker index when run by a worker). ``parallel``:
    this process's rank in a tensor-parallel group (``mstar.engine.distributed``).
    """

    def __init__(self, settings: WorkerSettings, timer_label: int = 0,
                 parallel: TensorParallel | None = None,
                 placed_nodes: dict[str, Callable] | None = None,
                 architecture: str | None = None) -> None:
        """``placed_nodes``: the calls of the encoder nodes MSTAR_ENCODER_PLACEMENT runs in a
        process of their own (the worker starts them, ``mstar.worker.encoder_node``).
        ``architecture``: the registry entry to run from the checkpoint in place of its config's
        (a chained walk's second language model, ``mstar.engine.chain``)."""
        start = time.perf_counter()
        self.settings = settings
        torch.manual_seed(settings.seed)
        if settings.torch_num_threads:
            torch.set_num_threads(settings.torch_num_threads)
        self.model_dir = model_dir = resolve_model_dir(settings)
        self.model_name = settings.model
        self.device, self.dtype = resolve_device_dtype(settings, model_dir)
        hf_config = node_config(AutoConfig.from_pretrained(model_dir), architecture)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.max_model_len = model_max_len(hf_config, settings.max_model_len)
        self.eos_token_ids = eos_token_ids(self.tokenizer, model_dir)
        self.pooling = model_pooling(model_dir, settings.embedding_pooling)  # for "auto" requests
        self.vocab_size = hf_config.get_text_config().vocab_size  # the width of the logits
        self.grammars = GrammarCompilePool(self.tokenizer, self.vocab_size,
                                           sorted(self.eos_token_ids),
                                           GrammarBounds.from_settings(settings),
                                           1 if parallel is None else parallel.size)
        self.rejected: list[tuple[str, RequestRejected]] = []  # grammars failed; the worker tells
        method = speculative_method(settings, model_dir)
        self.model_runner = ModelRunner(settings, model_dir, hf_config, self.device, self.dtype,
                                        self.max_model_len, parallel, mtp_head=method[0] == "mtp",
                                        placed_nodes=placed_nodes)
        self.model_runner.warmup()
        # What the model is made of (its registry entry's graph); each request walks it.
        self.graph = self.model_runner.graph
        self.block_manager = BlockManager(
            self.model_runner.num_blocks, settings.kv_block_size,
            self._prefix_caching(settings.enable_prefix_caching),
            StateSlots(self.model_runner.num_state_slots) if self.model_runner.num_state_slots
            else None)
        self.speculation = speculation_for(method, settings, self.model_runner,
                                           self.max_model_len)
        speculating = self.speculation is not None
        self.scheduler = Scheduler(self.block_manager, settings.max_num_seqs,
                                   settings.max_num_batched_tokens,
                                   OverlapPolicy(settings, self.device.type, serial_only=speculating),
                                   settings.max_encoder_tokens_per_step,
                                   self.speculation if speculating else NO_DRAFTS,
                                   self.model_runner.attention.bidirectional_images,
                                   prefill_cap(settings.max_prefill_chunk_tokens,
                                               self.device.type,
                                               settings.max_num_batched_tokens),
                                   PrefillShare(prefill_share(settings.prefill_share_beside_decodes,
                                                              self.device.type)),
                                   settings.priority_preemption,
                                   None if self.model_runner.lora is None else settings.max_loras)
        self.seqs: dict[str, Sequence] = {}
        self.encoder = EncoderCounts()  # the vision encoder cache's totals, from each step
        # Speech models (the graph has a codec: CSM, the talker) end on a frame, and their outputs carry
        # frames: chosen here once, so a text model's postprocess is what it was.
        self.frame_stop = (self.model_runner.frames.stop(speculating)
                           if self.model_runner.frames is not None else None)
        self.stop_rule = self._stop if self.frame_stop is None else self.frame_stop.reason
        self.loop = StepLoop(settings, self.scheduler, self.model_runner,
                             self.postprocess if self.frame_stop is None
                             else self._postprocess_frames, timer_label, self.speculation)
        log.info("engine_ready", model=self.model_name, device=str(self.device),
                 dtype=str(self.dtype).removeprefix("torch."),
                 kv_cache_dtype=str(self.model_runner.kv_dtype).removeprefix("torch."),
                 max_model_len=self.max_model_len,
                 num_kv_blocks=self.model_runner.num_blocks,
                 seconds=round(time.perf_counter() - start, 2))

    def _prefix_caching(self, enabled: bool) -> bool:
        """Off for hybrid models: cached K/V blocks do not restore a recurrent state."""
        if enabled and self.model_runner.num_state_slots:
            log.info("prefix_caching_off", reason="the model has recurrent-state (linear-attention) "
                     "layers; a cached KV prefix does not restore their state")
            return False
        return enabled

    # ---- request lifecycle -------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int],
                    params: SamplingParams, parts: tuple[MediaPart, ...] = (),
                    priority: int = NORMAL, feed: RowFeed | None = None) -> None:
        """``parts``: the prompt's media parts (``Prompt.parts``: images from
        ``mstar.models.vision.inputs.build_prompt``, audio clips from
        ``mstar.models.audio.prompt.build_audio_prompt``), placeholders already in
        ``prompt_token_ids``. The graph's prefill walk must take them. ``priority``: the
        request's class (``mstar.engine.schedule.priority``). ``feed``: the embedding rows of a
        model whose language model reads them (the graph's ``ROWS``: Qwen3-Omni's talker), one
        per prompt position (``prompt_token_ids``: ``feed.placeholder_ids()``) and per step."""
        if request_id in self.seqs:
            raise ValueError(f"request_id {request_id!r} is already in use")
        check_feed(self.graph, feed, len(prompt_token_ids))
        nodes = part_nodes(self.graph, parts)
        if self.model_runner.attention.bidirectional_images:
            check_image_runs_fit(parts, self.scheduler.max_num_batched_tokens)  # images only
        if params.pooling is not None:  # prefill only: no output tokens
            check_pooled_prompt_fits(len(prompt_token_ids), self.max_model_len)
            # Its row is sampled once (the token is dropped): greedy, so it draws no random
            # number from the generator unseeded requests share.
            params = msgspec.structs.replace(params, temperature=0.0, pooling=self.pooling
                                             if params.pooling == "auto" else params.pooling)
            total = len(prompt_token_ids)
        else:
            check_request_fits(len(prompt_token_ids), params.max_tokens, self.max_model_len)
            total = len(prompt_token_ids) + params.max_tokens
        need = self.block_manager.blocks_needed(total)
        if need > self.block_manager.num_blocks:
            raise RequestRejected(
                f"request needs {need} KV blocks ({total} tokens) but the whole cache has "
                f"{self.block_manager.num_blocks} blocks of {self.block_manager.block_size} tokens",
                "max_tokens")
        check_logit_bias_ids(params.logit_bias, self.vocab_size)
        text_rule = None if self.frame_stop is None else self.frame_stop.text_rule(params)
        if text_rule is not None:
            raise RequestRejected(f"{text_rule} is a text rule; a speech model's tokens are "
                                  f"codec frames", text_rule)
        if params.thinker_rows and not self.model_runner.entry.thinker_rows:
            raise RequestRejected("this model has no thinker rows for a talker (only "
                                  "Qwen3-Omni's thinker hands them out)", "thinker_rows")
        if params.speaker is not None:  # a chain (mstar.engine.chain) takes it off its nodes'
            raise RequestRejected("this engine runs no audio-out walk: a spoken reply needs a "
                                  "model whose graph speaks (Qwen3-Omni, run chained)", "speaker")
        if params.lora is not None and params.lora not in self.lora_names():
            raise RequestRejected(f"the model {params.lora!r} does not exist", "model", 404)
        spec = params.structured_output
        grammar = None if spec is None else self.grammars.start(request_id, spec)
        generator = None  # unseeded rows share the sampling batch's generator
        if params.seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(params.seed)
        state = new_sampling_state(params, self.eos_token_ids, self.vocab_size, grammar)
        seq = Sequence(request_id, prompt_token_ids, params, generator, state, tuple(parts), nodes,
                       None if params.lora is None else self.model_runner.lora.load_no[params.lora],
                       feed)
        self.seqs[request_id] = seq
        self.scheduler.add(seq, priority)  # admitted once its grammar is (``grammars.admit``, each step)

    def _fail_uncompiled(self) -> list[RequestOutput]:
        """Requests whose grammar failed (or ran out of time): finished as aborted; the reasons
        wait in ``rejected`` for ``take_rejected``."""
        outputs = []
        for request_id, error in self.grammars.admit():
            seq = self.seqs[request_id]
            log.warning("grammar_failed", request_id=request_id, error=str(error))
            self.rejected.append((request_id, error))
            self.abort_request(request_id)
            outputs.append(RequestOutput(request_id, finished=True, finish_reason="abort",
                                         num_prompt_tokens=seq.num_prompt_tokens))
        return outputs

    def take_rejected(self) -> list[tuple[str, RequestRejected]]:
        """The requests ended by their grammar since the last call, with the error to answer."""
        rejected, self.rejected = self.rejected, []
        return rejected

    def abort_request(self, request_id: str) -> None:
        """Abort a request, like a finish: nothing more is emitted; its blocks are freed at once,
        or once no step in flight may write to them (the scheduler's rule)."""
        seq = self.seqs.pop(request_id, None)
        if seq is not None:
            self.grammars.cancel(request_id)
            self.scheduler.finish(seq)

    # ---- LoRA adapters (docs/lora.rst) ---------------------------------------------------

    def lora_names(self) -> list[str]:
        """The adapters requests may select (none when the engine serves no LoRA)."""
        return [] if self.model_runner.lora is None else self.model_runner.lora.names()

    def load_lora(self, name: str, path) -> None:
        """Load an adapter at run time (ValueError: LoRA is off, or the adapter is refused)."""
        if self.model_runner.lora is None:
            raise ValueError("this engine serves no LoRA adapters (MSTAR_LORA_MODULES / "
                             "MSTAR_ALLOW_RUNTIME_LORA_UPDATING)")
        self.model_runner.lora.load(name, path)

    def unload_lora(self, name: str) -> None:
        """New requests may no longer select it; running ones finish on it (KeyError: unknown)."""
        if self.model_runner.lora is None:
            raise KeyError(name)
        self.model_runner.lora.unload(name)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or self.loop.in_flight

    def bind_threads(self, cpus: tuple[int, ...]) -> None:
        """MSTAR_CPU_BIND (a worker's engine on CPU): the intra-op threads of each thread that runs
        forwards, thread i on ``cpus[i]``; this thread's now, the forward thread's as it starts."""
        bind = intra_op_binder(cpus, self.settings.cache_dir) if self.device.type == "cpu" else None
        if bind is not None:
            bind()
            self.loop.thread_setup = bind
            log.info("cpu_bound", engine_cpus=list(cpus))

    def shutdown(self) -> None:
        self.loop.shutdown()
        self.grammars.shutdown()
        self.model_runner.sampler.shutdown()

    def apply_settings(self, settings: WorkerSettings) -> None:
        """A settings reload, between steps: only the step loop's knobs change at run time."""
        self.settings = settings
        self.loop.apply(settings)

    def stats(self) -> EngineStats:
        """The engine's load and its work so far, in one value."""
        bm = self.block_manager
        encoder = self.encoder
        spec = None if self.speculation is None else self.speculation.stats
        lora = self.model_runner.lora
        return EngineStats(
            len(self.scheduler.running), len(self.scheduler.waiting), bm.num_free_blocks,
            1.0 - bm.num_free_blocks / bm.num_blocks, self.scheduler.num_preemptions,
            encoder.hits, encoder.misses, round(encoder.seconds, 4),
            *(("", 0, 0, 0.0, 0.0) if spec is None else (
                spec.method, spec.proposed, spec.accepted, round(spec.propose_s, 3),
                round(spec.verify_s, 3))),
            *((0, 0) if lora is None else (lora.loads, lora.evictions)))

    # ---- stepping ----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One iteration of the step loop: the outputs of the step that finished in it."""
        failed = self._fail_uncompiled()
        if self.model_runner.lora is not None and self.model_runner.lora.retiring:
            self.model_runner.lora.sweep({seq.params.lora for seq in self.seqs.values()})
        outputs = failed + self.loop.step()
        if not outputs and not self.loop.in_flight:
            self._wait_for_grammars()
        return outputs

    def _wait_for_grammars(self) -> None:
        """Nothing ran: when requests wait only for their grammars, block on those a moment. A
        caller looping on ``step()`` would otherwise hold the GIL and starve the compile threads."""
        self.grammars.wait_any(GRAMMAR_WAIT_S)

    def postprocess(self, out: SchedulerOutput, result: RunnerOutput) -> list[RequestOutput]:
        """Apply a finished step: the scheduler appends each request's tokens and finishes the
        ones the stop rule ends; one output per request (speculative decoding emits several
        tokens); a pooling request ends with its vector."""
        if result.encoder is not None:
            self.encoder.add(result.encoder)
        for seq_no, prob in result.no_speech.items():  # kept until the request's first token
            if seq_no in self.scheduler.live:
                self.scheduler.live[seq_no].no_speech_prob = prob
        emitted = self.scheduler.update(out, result, self.stop_rule)
        for e in emitted:
            if e.finish_reason is not None:
                del self.seqs[e.seq.request_id]
        if result.thinker_rows:  # Qwen3-Omni's thinker, for the requests that asked
            return [with_rows(e.output(result.pooled), result.thinker_rows.get(e.seq.seq_no))
                    for e in emitted]
        return [e.output(result.pooled) for e in emitted]

    def _postprocess_frames(self, out: SchedulerOutput, result: RunnerOutput
                            ) -> list[RequestOutput]:
        """A speech model's step: each request's frame joins it before its token (the stop rule
        reads it), and its output carries the frame. One frame per sampled row: speech runs
        without speculative decoding, so a row emits at most its one token."""
        made = {}
        for seq_no, frame in result.frames.items():
            seq = self.scheduler.live.get(seq_no)
            if seq is not None and seq.status is SequenceStatus.RUNNING:  # as update() emits
                seq.frames.append(frame)
                made[seq.request_id] = [frame]
        return [msgspec.structs.replace(o, new_frames=made[o.request_id])
                if o.request_id in made else o for o in self.postprocess(out, result)]

    def _stop(self, seq: Sequence, token: int) -> str | None:
        """The stop rule, after each token appended: why ``seq`` ends there, or None. A pooling
        request ends with its prompt (its one sampled token is dropped)."""
        if seq.params.pooling is not None:
            return "stop"
        return finish_reason(seq.params, token, seq.num_output_tokens, self.eos_token_ids)
