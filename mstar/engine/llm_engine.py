"""LLMEngine: requests in, per-step token deltas out, through the one step loop.

The engine deals in token ids only: text, stop strings and logprob formatting are the caller's
(``mstar.output``).
"""

from __future__ import annotations

import json
import time

import msgspec
import structlog
import torch
from transformers import AutoConfig, AutoTokenizer

from mstar.engine.kv.block_manager import BlockManager
from mstar.engine.kv.state_cache import StateSlots
from mstar.engine.placement import resolve_device_dtype
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import (
    check_image_runs_fit,
    check_logit_bias_ids,
    check_pooled_prompt_fits,
    check_request_fits,
)
from mstar.engine.request.outputs import RequestOutput, TokenLogprob, finish_reason, merged
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.request.sequence import Sequence
from mstar.engine.runner.model_runner import ModelRunner
from mstar.engine.runner.pooling import model_pooling
from mstar.engine.sampling.state import new_sampling_state
from mstar.engine.schedule.overlap_policy import OverlapPolicy
from mstar.engine.schedule.scheduler import Scheduler
from mstar.engine.schedule.scheduler_output import RunnerOutput, SchedulerOutput
from mstar.engine.speculative.setup import speculation_for
from mstar.engine.step_loop import StepLoop
from mstar.engine.structured.grammar_pool import GrammarBounds, GrammarCompilePool
from mstar.graph import text_only
from mstar.models.families.parallel import TensorParallel
from mstar.models.loading.resolve import resolve_model_dir
from mstar.models.vision.inputs import ImageInput
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
                 parallel: TensorParallel | None = None) -> None:
        start = time.perf_counter()
        self.settings = settings
        torch.manual_seed(settings.seed)
        if settings.torch_num_threads:
            torch.set_num_threads(settings.torch_num_threads)
        self.model_dir = model_dir = resolve_model_dir(settings)
        self.model_name = settings.model
        self.device, self.dtype = resolve_device_dtype(settings)
        hf_config = AutoConfig.from_pretrained(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        limit = hf_config.get_text_config().max_position_embeddings
        self.max_model_len = settings.max_model_len or limit
        if self.max_model_len > limit:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's "
                f"max_position_embeddings={limit}"
            )
        self.eos_token_ids = self._eos_ids(model_dir)
        self.pooling = model_pooling(model_dir, settings.embedding_pooling)  # for "auto" requests
        self.vocab_size = hf_config.get_text_config().vocab_size  # the width of the logits
        self.grammars = GrammarCompilePool(self.tokenizer, self.vocab_size,
                                           sorted(self.eos_token_ids),
                                           GrammarBounds.from_settings(settings),
                                           1 if parallel is None else parallel.size)
        self.rejected: list[tuple[str, RequestRejected]] = []  # grammars failed; the worker tells
        self.model_runner = ModelRunner(settings, model_dir, hf_config, self.device, self.dtype,
                                        self.max_model_len, parallel)
        self.model_runner.warmup()
        # What the model is made of; each request walks its graph (images: through the encoder).
        self.graph = getattr(self.model_runner.model, "graph", None) or text_only()
        self.block_manager = BlockManager(
            self.model_runner.num_blocks, settings.kv_block_size,
            self._prefix_caching(settings.enable_prefix_caching),
            StateSlots(self.model_runner.num_state_slots) if self.model_runner.num_state_slots
            else None)
        self.speculation = speculation_for(settings, model_dir, self.model_runner,
                                           self.max_model_len)
        loop_settings = settings
        if self.speculation is not None:  # the overlap cap auto yields: the loop runs serially
            loop_settings = settings.model_copy(update={"max_consecutive_spec_steps": 0})
        self.scheduler = Scheduler(self.block_manager, settings.max_num_seqs,
                                   settings.max_num_batched_tokens,
                                   OverlapPolicy(loop_settings, self.device.type),
                                   settings.max_encoder_tokens_per_step, self.speculation,
                                   self.model_runner.bidirectional_images)
        self.seqs: dict[str, Sequence] = {}
        self.loop = StepLoop(loop_settings, self.scheduler, self.model_runner, self.postprocess,
                             timer_label)
        log.info("engine_ready", model=self.model_name, device=str(self.device),
                 dtype=str(self.dtype).removeprefix("torch."), max_model_len=self.max_model_len,
                 num_kv_blocks=self.model_runner.num_blocks,
                 seconds=round(time.perf_counter() - start, 2))

    def _prefix_caching(self, enabled: bool) -> bool:
        """Off for hybrid models: cached K/V blocks do not restore a recurrent state."""
        if enabled and self.model_runner.num_state_slots:
            log.info("prefix_caching_off", reason="the model has recurrent-state (linear-attention) "
                     "layers; a cached KV prefix does not restore their state")
            return False
        return enabled

    def _eos_ids(self, model_dir) -> set[int]:
        ids = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        gen_config = model_dir / "generation_config.json"
        if gen_config.is_file():
            eos = json.loads(gen_config.read_text()).get("eos_token_id")
            ids.update(eos if isinstance(eos, list) else [] if eos is None else [eos])
        return ids

    # ---- request lifecycle -------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: list[int],
                    params: SamplingParams, images: tuple[ImageInput, ...] = ()) -> None:
        """``images``: a vision model's inputs (``mstar.models.vision.inputs.build_prompt``),
        their placeholders already in ``prompt_token_ids``."""
        if request_id in self.seqs:
            raise ValueError(f"request_id {request_id!r} is already in use")
        try:
            self.graph.prefill_walk({"text", "image"} if images else {"text"})
        except ValueError as exc:
            raise RequestRejected(str(exc), "messages") from exc
        if self.model_runner.bidirectional_images:
            check_image_runs_fit(images, self.scheduler.max_num_batched_tokens)
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
        spec = params.structured_output
        grammar = None if spec is None else self.grammars.start(request_id, spec)
        generator = None  # unseeded rows share the sampling batch's generator
        if params.seed is not None:
            generator = torch.Generator(device=self.device)
            generator.manual_seed(params.seed)
        state = new_sampling_state(params, self.eos_token_ids, self.vocab_size, grammar)
        seq = Sequence(request_id, prompt_token_ids, params, generator, state, tuple(images))
        self.seqs[request_id] = seq
        self.scheduler.add(seq)  # admitted once its grammar is (``grammars.admit``, each step)

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

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished() or self.loop.in_flight

    def shutdown(self) -> None:
        self.loop.shutdown()
        self.grammars.shutdown()
        self.model_runner.sampler.shutdown()

    def apply_settings(self, settings: WorkerSettings) -> None:
        """A settings reload, between steps: only the step loop's knobs change at run time."""
        self.settings = settings
        self.loop.apply(settings)

    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    def num_running(self) -> int:
        return len(self.scheduler.running)

    def num_free_blocks(self) -> int:
        return self.block_manager.num_free_blocks

    def num_preemptions(self) -> int:
        return self.scheduler.num_preemptions

    def encoder_stats(self) -> tuple[int, int, float]:
        """Vision encoder so far: (cache hits, misses, seconds encoding)."""
        cache = self.model_runner.encoder_cache
        return cache.hits, cache.misses, round(cache.encode_seconds, 4)

    def speculation_totals(self) -> tuple[str, int, int, float, float]:
        """Speculative decoding so far: (method or "", proposed, accepted, propose s, verify s)."""
        if self.speculation is None:
            return ("", 0, 0, 0.0, 0.0)
        s = self.speculation.stats
        return (s.method, s.proposed, s.accepted, round(s.propose_s, 3), round(s.verify_s, 3))

    def kv_cache_usage(self) -> float:
        return 1.0 - self.block_manager.num_free_blocks / self.block_manager.num_blocks

    # ---- stepping ----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One iteration of the step loop: the outputs of the step that finished in it."""
        failed = self._fail_uncompiled()
        outputs = failed + self.loop.step()
        if not outputs and not self.loop.in_flight:
            self._wait_for_grammars()
        return outputs

    def _wait_for_grammars(self) -> None:
        """Nothing ran: when requests wait only for their grammars, block on those a moment. A
        caller looping on ``step()`` would otherwise hold the GIL and starve the compile threads."""
        self.grammars.wait_any(GRAMMAR_WAIT_S)

    def postprocess(self, out: SchedulerOutput, result: RunnerOutput) -> list[RequestOutput]:
        """Apply a finished step (the scheduler's progress), then each sampled token's stops; a
        request's tokens of one step (speculative decoding emits several) make one output; a
        pooling request ends with its vector."""
        outputs: list[RequestOutput] = []
        for seq, token, logprobs in self.scheduler.update(out, result):
            if seq.params.pooling is not None:
                outputs.append(self._pooled(seq, result.pooled[seq.seq_no]))
                continue
            output = self._append(seq, token, logprobs)
            if outputs and outputs[-1].request_id == output.request_id:
                output = merged(outputs.pop(), output)
            outputs.append(output)
        return outputs

    def _pooled(self, seq: Sequence, vector: bytes) -> RequestOutput:
        """A pooling request ends with its prompt: its vector, no tokens."""
        self.scheduler.finish(seq)
        del self.seqs[seq.request_id]
        return RequestOutput(request_id=seq.request_id, finished=True, finish_reason="stop",
                             num_prompt_tokens=seq.num_prompt_tokens,
                             num_cached_tokens=seq.num_cached_tokens, embedding=vector)

    def _append(self, seq: Sequence, token: int, logprobs: TokenLogprob | None) -> RequestOutput:
        reason = finish_reason(seq.params, token, seq.num_output_tokens, self.eos_token_ids)
        if reason is not None:
            self.scheduler.finish(seq)
            del self.seqs[seq.request_id]
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=[token],
            finished=reason is not None,
            finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            logprobs=[logprobs] if logprobs is not None else None,
        )

