"""A chained walk in one process (issue 35): Qwen3-Omni's ``thinker -> talker -> code2wav`` for
the requests that ask for a spoken reply (``SamplingParams.speaker``).

Two language-model nodes, each an ``LLMEngine`` with its own scheduler, KV cache and block budget
(the talker's settings may differ: ``talker_settings``), stepped by one loop (``step``): the
thinker's step, then the talker's. Between them runs the streaming edge (``TalkerEdge``): the
request's talker prefill once the thinker's first token is out, a row per later token into its
``RowFeed``, ``tts_eos`` and the feed's finish at the thinker's end; a talker request whose next
row has not arrived waits (``feed_cut``). The talker's frames go through code2wav in the served
windows (``served_windows``: MSTAR_SPEECH_CHUNK_FRAMES after MSTAR_SPEECH_LEFT_CONTEXT; the graph
declares transformers' 300 after 25, whose first audio comes 24 s of frames in) and leave as
``AudioChunk``s in the request's outputs, beside the thinker's ``new_token_ids`` (the frames
themselves too, in ``new_frames``, as a speech model's outputs carry them). code2wav is a codec node
seam (``CodecSeam``: a request's state by its id), here or, where the worker places it, in a
process of its own (``mstar.worker.codec_node``). A request finishes
when both nodes have. The thinker's last text leaves when the thinker ends (``split_finish``);
only its finish (the stop token it ended on, and the finish reason) waits for the talker's, and
leaves with the last audio. docs/speech.rst, "The chained walk", says
why one scheduler per node.

The talker runs in the worker's process (``LocalTalker``) or in a process of its own
(MSTAR_ENCODER_PLACEMENT ``talker=process``: the worker hands the chain its handle), behind one
interface (``talker_seam.Talker``), chosen once here; the chain's steps are the same either way.

A request without ``speaker`` is a plain thinker request (its outputs pass through untouched), and
a model whose registry entry names no talker gets no chain (``mstar.llm.LLM`` runs its engine).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import msgspec
import structlog

from mstar.engine.chain.talker_edge import EdgeModules, TalkerEdge, speaker_id
from mstar.engine.chain.talker_seam import LocalTalker, Talker
from mstar.engine.engine_stats import EngineStats
from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import check_request_fits
from mstar.engine.request.outputs import RequestOutput, audio_chunk, split_finish
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.schedule.priority import NORMAL
from mstar.graph.chunks import ChunkPolicy, frame_windows
from mstar.models.media_part import MediaPart
from mstar.models.speech.codec_node import CodecSeam
from mstar.models.speech.omni_code2wav import Code2Wav
from mstar.models.speech.omni_talker_inputs import prefill_length
from mstar.models.speech.row_feed import RowFeed
from mstar.models.speech.utterance import frames_in
from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def served_windows(settings: WorkerSettings) -> ChunkPolicy:
    """code2wav's windows as served: MSTAR_SPEECH_CHUNK_FRAMES new frames after
    MSTAR_SPEECH_LEFT_CONTEXT (transformers' ``chunked_decode`` gives the same samples for the
    same numbers: test/models/test_omni_code2wav.py)."""
    return frame_windows(settings.speech_chunk_frames, settings.speech_left_context)


def talker_engine_settings(settings: WorkerSettings) -> WorkerSettings:
    """The talker engine's settings: the thinker's, with its own block budget
    (MSTAR_TALKER_NUM_KV_BLOCKS, where set) and no placement (the talker's own graph has no node
    to place; the map is the thinker's graph's)."""
    update: dict = {"encoder_placement": ""}
    if settings.talker_num_kv_blocks is not None:
        update["num_kv_blocks"] = settings.talker_num_kv_blocks
    return settings.model_copy(update=update)


@dataclass
class Spoken:
    """One chained request's state between its nodes."""

    edge: TalkerEdge
    talking: bool = False  # the talker request was added
    talked: bool = False  # the talker finished (or will never run)
    last: RequestOutput | None = None  # the thinker's finishing output, while the talker runs


class SpeechChain:
    def __init__(self, thinker: LLMEngine, talker_settings: WorkerSettings | None = None,
                 talker: Talker | None = None, codec: CodecSeam | None = None) -> None:
        """``thinker``: the engine of a model whose registry entry names a talker;
        ``talker_settings``: the talker node's engine settings; None: the thinker's, with
        MSTAR_TALKER_NUM_KV_BLOCKS as its block budget (``talker_engine_settings``);
        ``talker``: the talker placed apart (``mstar.worker.talker_node``); None: its engine,
        built here; ``codec``: code2wav as the worker placed it; None: here, in the served
        windows."""
        from transformers import AutoConfig

        entry = thinker.model_runner.entry
        if entry.talker is None:
            raise ValueError("this model's graph has no audio-out walk to chain")
        self.thinker = thinker
        settings = talker_settings or talker_engine_settings(thinker.settings)
        self.talker = talker or LocalTalker(LLMEngine(settings, architecture=entry.talker))
        self.config = AutoConfig.from_pretrained(thinker.model_dir)
        self.edge = EdgeModules.load(thinker.model_dir, self.config.talker_config,
                                     thinker.device, thinker.dtype)
        self.codec = codec or Code2Wav.load(thinker.model_dir, self.talker.device,
                                            self.talker.dtype, served_windows(settings)
                                            ).codec_node()
        self.max_frames = frames_in(settings.max_speech_seconds)
        self.embed = thinker.model_runner.model.embed
        self.spoken: dict[str, Spoken] = {}

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
                    parts: tuple[MediaPart, ...] = (), priority: int = NORMAL,
                    feed: RowFeed | None = None) -> None:
        """``LLMEngine.add_request``'s arguments; with ``params.speaker``, a spoken reply."""
        if params.speaker is None:
            self.thinker.add_request(request_id, prompt_token_ids, params, parts, priority, feed)
            return
        voice = speaker_id(self.config, params.speaker)
        self._check_talker_fits(prompt_token_ids)
        edge = TalkerEdge(self.edge, self.config, self.embed, list(prompt_token_ids), voice)
        thinker_params = msgspec.structs.replace(params, speaker=None, thinker_rows=True)
        self.thinker.add_request(request_id, prompt_token_ids, thinker_params, parts, priority,
                                 feed)
        self.spoken[request_id] = Spoken(edge)

    def _check_talker_fits(self, prompt: list[int]) -> None:
        """The talker request the prompt will make (its prefill rows and up to ``max_frames``
        frames) fits the talker's context and whole KV budget: refused at admission, not once
        the thinker has run."""
        rows = prefill_length(prompt, self.config)
        check_request_fits(rows, self.max_frames, self.talker.max_model_len, "prompt",
                           "max_speech_seconds")
        need = self.talker.blocks_needed(rows + self.max_frames)
        if need > self.talker.num_blocks:
            raise RequestRejected(
                f"the spoken reply needs {need} talker KV blocks ({rows} prefill rows and "
                f"{self.max_frames} frames, MSTAR_MAX_SPEECH_SECONDS) but the talker's cache has "
                f"{self.talker.num_blocks}", "max_speech_seconds")

    def has_unfinished_requests(self) -> bool:
        return self.thinker.has_unfinished_requests() or self.talker.has_unfinished_requests()

    def abort_request(self, request_id: str) -> None:
        """Both nodes' work for the request stops; its blocks go back in both caches."""
        self.thinker.abort_request(request_id)
        self.talker.abort_request(request_id)
        self.spoken.pop(request_id, None)
        self.codec.forget([request_id])

    def stats(self) -> EngineStats:
        """Both nodes' load as one engine's (the worker's gauges, so /metrics): requests in a
        batch or waiting, per node, summed; blocks and their usage over both caches; the
        thinker's other counters."""
        a, b = self.thinker.stats(), self.talker.stats()
        total = self.thinker.block_manager.num_blocks + self.talker.num_blocks
        free = a.free_blocks + b.free_blocks
        return dataclasses.replace(a, running=a.running + b.running,
                                   waiting=a.waiting + b.waiting, free_blocks=free,
                                   kv_cache_usage=1.0 - free / total,
                                   preemptions=a.preemptions + b.preemptions)

    def shutdown(self) -> None:
        self.thinker.shutdown()
        self.talker.shutdown()

    def step(self) -> list[RequestOutput]:
        """One step of each node that has work: the thinker's, then the talker's."""
        outputs = []
        if self.thinker.has_unfinished_requests():
            outputs += [o for o in map(self._from_thinker, self.thinker.step()) if o is not None]
        if self.talker.has_unfinished_requests():  # waits only when the thinker has no work
            talked = self.talker.step(wait=not self.thinker.has_unfinished_requests())
            outputs += [o for o in self._from_talker(talked) if o is not None]
        return outputs

    def _from_thinker(self, out: RequestOutput) -> RequestOutput | None:
        state = self.spoken.get(out.request_id)
        if state is None:
            return out
        feed = state.edge.take(out)
        return self._after_thinker(msgspec.structs.replace(out, thinker_rows=None), state, feed)

    def _after_thinker(self, out: RequestOutput, state: Spoken, feed) -> RequestOutput | None:
        if feed is not None:
            params = SamplingParams(max_tokens=self.max_frames, temperature=0.0)
            try:  # admission checked the fit (``_check_talker_fits``); a refusal here is a bug
                self.talker.add(out.request_id, feed, params)
            except RequestRejected:
                log.exception("talker_refused", request_id=out.request_id)
                self.abort_request(out.request_id)
                return msgspec.structs.replace(out, finished=True, finish_reason="abort")
            state.talking = True
        if not out.finished:
            return out
        if out.finish_reason == "abort" or not state.talking:  # nothing (more) to speak
            self.talker.abort_request(out.request_id)
            self.codec.forget([out.request_id])
            state.talked = True
        if state.talked:
            self.spoken.pop(out.request_id)
            return out
        # the text leaves now; the finish (and its stop token) when the talker's does
        now, state.last = split_finish(out)
        return now

    def _from_talker(self, outs: list[RequestOutput]) -> list[RequestOutput | None]:
        """A talker step's outputs, each with the audio its frames made ready: one codec call
        for the step's requests (a codec placed apart answers them in one message)."""
        live = [out for out in outs if out.request_id in self.spoken]  # others were aborted
        # (a talker placed apart may hand over several of its steps at once: a request can have
        # more than one output here, each with its own frames, in order)
        sounding = [i for i, out in enumerate(live) if out.new_frames or out.finished]
        made = self.codec.take_all([(live[i].request_id, live[i].new_frames or [],
                                     live[i].finished) for i in sounding]) if sounding else []
        chunks = dict(zip(sounding, made, strict=True))
        return [self._sounded(out, chunks.get(i, [])) for i, out in enumerate(live)]

    def _sounded(self, out: RequestOutput, chunks: list) -> RequestOutput | None:
        state = self.spoken[out.request_id]
        if out.finished:
            state.talked = True
        audio = None
        if chunks or (out.finished and state.last is not None):
            audio = audio_chunk(chunks, self.codec.sample_rate)
        frames = out.new_frames or None  # the codes, as a speech model's outputs carry them
        if state.talked and state.last is not None:  # both nodes are done
            self.spoken.pop(out.request_id)
            return msgspec.structs.replace(state.last, new_audio=audio, new_frames=frames)
        if audio is None and frames is None:
            return None
        return RequestOutput(out.request_id, new_audio=audio, new_frames=frames)
