"""Offline batch API: ``LLM(...).generate(prompts)`` / ``.chat(conversations)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mstar.engine.chain.speech_chain import SpeechChain
from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector
from mstar.logging_setup import start_logging
from mstar.models.vision.inputs import load_processor
from mstar.output.processor import RequestText, ends_in_engine
from mstar.prompt import chat_media
from mstar.prompt.transcription import LongForm, Segment, WhisperTokens, decoder_prompt, text_ids
from mstar.prompt.value import Prompt
from mstar.settings import load_settings

# Used when generate()/chat() get no sampling_params: greedy, up to 256 new tokens.
DEFAULT_MAX_TOKENS = 256


@dataclass
class GenerationResult:
    prompt_token_ids: list[int]
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    embedding: bytes | None = None  # a pooling request's vector (little-endian float32)
    logprobs: list[float] = field(default_factory=list)  # of token_ids, where asked
    no_speech_prob: float | None = None  # Whisper's (mstar.engine.runner.no_speech)
    # A spoken reply (SamplingParams.speaker, a chained model): mono float32 samples at
    # ``sample_rate``, the codec node's chunks joined
    audio: Any = None
    sample_rate: int | None = None


@dataclass
class Transcription:
    text: str
    segments: list[Segment]  # start/end seconds and token ids (``mstar.prompt.transcription``)


def read_audio(audio, rate: int):
    """A path (decoded by soundfile, mixed to mono, resampled by soxr) or samples at ``rate``."""
    import numpy as np

    if not isinstance(audio, (str, bytes)) and not hasattr(audio, "__fspath__"):
        return np.asarray(audio, dtype=np.float32)
    import soundfile
    import soxr

    samples, source_rate = soundfile.read(audio, dtype="float32", always_2d=True)
    mono = samples.mean(axis=1)
    return mono if source_rate == rate else soxr.resample(mono, source_rate, rate)


def joined_audio(chunks):
    """A request's ``AudioChunk``s as one float32 array and its rate."""
    import numpy as np

    samples = np.concatenate([np.frombuffer(c.samples, dtype="<f4") for c in chunks])
    return samples, chunks[-1].rate


class LLM:
    """Runs requests to completion in-process.

    ``model`` is a local HF-format directory or the built-in model name (None keeps the
    settings default, the built-in model); other keyword arguments override settings knobs.
    """

    def __init__(self, model: str | None = None, **knob_overrides: Any) -> None:
        overrides = dict(knob_overrides)
        if model is not None:
            overrides["model"] = model
        loaded = load_settings(overrides=overrides)
        start_logging(loaded)  # every settings warning is logged before the engine loads
        self.settings = loaded.settings
        self.engine = LLMEngine(self.settings)
        # Qwen3-Omni: a second language model (the talker) and code2wav for spoken replies
        self.chain = (SpeechChain(self.engine) if self.engine.model_runner.entry.talker
                      else None)
        self.tokenizer = self.engine.tokenizer
        self._next_id = 0
        self._vision_processor = None  # a vision model's processor, loaded at its first image
        self._voice = None  # a speech model's codec and tokenizer, loaded at its first speak()

    def generate(self, prompts, sampling_params=None) -> list[GenerationResult]:
        """Prompts: str, {"prompt_token_ids": [...]}, or a list of those.

        ``sampling_params``: one SamplingParams for all prompts or a list with one per prompt;
        None means greedy with max_tokens=256.
        """
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        token_lists = [Prompt(self._tokenize(p)) for p in prompts]
        params = self._params_list(sampling_params, len(token_lists))
        return self._run(token_lists, params)

    def chat(self, messages, sampling_params=None) -> list[GenerationResult]:
        """One conversation (list of {"role", "content"}) or a list of conversations.

        A vision model's messages may hold OpenAI ``image_url`` parts (``data:`` URLs) or
        ``{"type": "image", "image": <PIL image>}`` parts, rendered by its processor."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [self._chat_prompt(conv) for conv in conversations]
        params = self._params_list(sampling_params, len(prompts))
        return self._run(prompts, params)

    def _chat_prompt(self, conversation: list[dict]) -> Prompt:
        if chat_media.has_media(conversation):
            processor = self._processor()
            pictures = [chat_media.offline_picture(ref)
                        for ref in chat_media.media_refs(conversation)]
            return chat_media.build(processor, chat_media.render(processor, conversation),
                                    pictures)
        return Prompt(list(self.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=True, return_dict=False)))

    def _processor(self):
        if self._vision_processor is None:
            self._vision_processor = load_processor(self.engine.model_dir)
        return self._vision_processor

    def transcribe(self, audio, language: str | None = None, task: str = "transcribe",
                   timestamps: bool = False, prompt: str | None = None,
                   logprob_threshold: float | None = None,
                   no_speech_threshold: float | None = None):
        """A Whisper model's transcript of ``audio``: a file path, or mono float32 samples at
        16 kHz, or a list of those (run concurrently; a list of results back). Long audio runs in
        sequential 30 s windows, as transformers' generate does (``mstar.prompt.transcription``).
        ``task="translate"`` (multilingual models) translates to English. Returns a
        ``Transcription`` (``text``, ``segments`` with start/end seconds)."""
        import json

        from transformers import AutoFeatureExtractor

        from mstar.models.audio.whisper_features import long_features, window_input

        model_dir = self.engine.model_dir
        tokens = WhisperTokens.from_generation_config(
            json.loads((model_dir / "generation_config.json").read_text()))
        fe = AutoFeatureExtractor.from_pretrained(model_dir)
        text = tuple(self.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)
                     ) if prompt else ()
        ids = decoder_prompt(tokens, language, task, timestamps, text)
        clips = [read_audio(a, fe.sampling_rate) for a in
                 (audio if isinstance(audio, list) else [audio])]
        feats = [long_features(fe, c) for c in clips]
        plans = [LongForm(tokens, frames, logprob_threshold, no_speech_threshold)
                 for _, frames in feats]
        # Logprobs (a log-softmax over the vocabulary per token) only for the no-speech check.
        params = SamplingParams(temperature=0.0, max_tokens=self.engine.max_model_len - len(ids),
                                logprobs=None if logprob_threshold is None else 0)
        while any(p.window() is not None for p in plans):  # one window of every unfinished clip
            live = [(p, f) for p, (f, _) in zip(plans, feats, strict=True) if p.window()]
            prompts = [Prompt(ids, (window_input(f, *p.window()),)) for p, f in live]
            for (p, _), out in zip(live, self._run(prompts, [params] * len(live)), strict=True):
                p.done(out.token_ids, out.logprobs, out.no_speech_prob)
        results = [Transcription(self._text(tokens, p.segments), p.segments) for p in plans]
        return results if isinstance(audio, list) else results[0]

    def _text(self, tokens: WhisperTokens, segments: list[Segment]) -> str:
        return "".join(self.tokenizer.decode(text_ids(tokens, s.token_ids)) for s in segments)

    def speak(self, prompts, speaker: int = 0, max_frames: int | None = None) -> list:
        """Speech out (a model whose graph ends in a codec, CSM): each prompt (text, as the
        model's turn ``[speaker]text``, or ``{"prompt_token_ids": [...]}``) spoken greedily,
        at most ``max_frames`` frames (unset: MSTAR_MAX_SPEECH_SECONDS of them).
        The frames come from the engine (its paged KV cache, batched, preemptible) and are
        sounded by the codec node in the graph's windows; returns one
        ``mstar.models.speech.voice.Speech`` (audio, sample rate, codes) per prompt. Mimi and
        the tokenizer are loaded at the first call (``Voice.load``)."""
        import torch

        from mstar.models.speech.utterance import check_max_frames, frames_in
        from mstar.models.speech.voice import Voice

        graph = self.engine.graph
        if not graph.speaks_frames:  # the codec after the engine's own language model (CSM)
            raise ValueError(f"this model outputs {', '.join(graph.output_modalities())}; not "
                             "audio from its own frames (speak runs a model whose language "
                             "model streams frames to a codec: CSM)")
        if max_frames is None:  # the seconds bound's frames (MSTAR_MAX_SPEECH_SECONDS)
            max_frames = frames_in(self.settings.max_speech_seconds)
        check_max_frames(max_frames)
        if self._voice is None:
            self._voice = Voice.load(self.engine.model_dir)
        prompts = [prompts] if isinstance(prompts, (str, dict)) else prompts
        ids = [self._voice.prompt_ids(prompt, speaker) for prompt in prompts]
        frames = self._frames(ids, SamplingParams(max_tokens=max_frames, temperature=0.0))
        return [self._voice.speech(self._voice.sound(torch.tensor(f).unbind(0), max_frames))
                for f in frames]

    def _frames(self, prompts: list[list[int]], params: SamplingParams) -> list[list[list[int]]]:
        """Each request's frames from the engine, run to the end."""
        ids = []
        for prompt in prompts:
            ids.append(f"llm-{self._next_id}")
            self._next_id += 1
            self.engine.add_request(ids[-1], prompt, params)
        frames = {rid: [] for rid in ids}
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                frames[out.request_id] += out.new_frames or []
        return [frames[rid] for rid in ids]

    def embed(self, prompts, pooling: str = "auto") -> list[list[float]]:
        """One vector per prompt (same prompt forms as ``generate``): the final hidden states
        (after the final norm) pooled ``last``, ``mean`` or ``auto`` (the engine's rule), not
        normalized."""
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        token_lists = [Prompt(self._tokenize(p)) for p in prompts]
        params = [SamplingParams(max_tokens=1, pooling=pooling)] * len(token_lists)
        return [bytes_vector(r.embedding).tolist() for r in self._run(token_lists, params)]

    def _tokenize(self, prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            return list(prompt["prompt_token_ids"])
        raise TypeError(
            f"prompt must be a str or {{'prompt_token_ids': [...]}}, got {type(prompt).__name__}"
        )

    @staticmethod
    def _params_list(sampling_params, n: int) -> list[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams(temperature=0.0, max_tokens=DEFAULT_MAX_TOKENS)] * n
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * n
        params = list(sampling_params)
        if len(params) != n:
            raise ValueError(
                f"sampling_params has {len(params)} entries but there are {n} prompts"
            )
        return params

    def _run(self, prompts: list[Prompt], params) -> list[GenerationResult]:
        """Run the requests to the end; their text is made here, as in the API server
        (``mstar.output``): a stop string aborts its request in the engine."""
        for p in params:  # a bad constraint is refused before any request of the call runs
            if p.structured_output is not None:
                self.engine.grammars.check(p.structured_output)
        engine = self.chain or self.engine  # a chained model's requests walk its chain
        ids = []
        results = {}
        texts = {}
        audio = {}
        for prompt, p in zip(prompts, params, strict=True):
            rid = f"llm-{self._next_id}"
            self._next_id += 1
            try:
                engine.add_request(rid, prompt.token_ids, p, prompt.parts, feed=prompt.feed)
            except ValueError:  # a rejected request (bad schema, too long): none of them runs
                for added in ids:
                    engine.abort_request(added)
                raise
            ids.append(rid)
            results[rid] = GenerationResult(prompt_token_ids=list(prompt.token_ids))
            texts[rid] = RequestText(self.tokenizer, prompt.token_ids, p)
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.new_audio is not None:
                    audio.setdefault(out.request_id, []).append(out.new_audio)
                text = texts[out.request_id].to_text(out)
                if text is None:  # ended at a stop string; the engine's abort is on its way
                    continue
                if ends_in_engine(text, out):
                    engine.abort_request(out.request_id)
                r = results[out.request_id]
                r.text += text.new_text
                r.token_ids += text.new_token_ids
                if out.logprobs:
                    r.logprobs += [lp.logprob for lp in out.logprobs]
                if text.no_speech_prob is not None:
                    r.no_speech_prob = text.no_speech_prob
                if text.finished:
                    r.finish_reason = text.finish_reason
                    r.embedding = text.embedding
        for rid, chunks in audio.items():
            results[rid].audio, results[rid].sample_rate = joined_audio(chunks)
        self.engine.take_rejected()  # their outputs ended as "abort"; the server's answer is unused
        return [results[rid] for rid in ids]

