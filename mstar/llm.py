"""Offline batch API: ``LLM(...).generate(prompts)`` / ``.chat(conversations)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mstar.engine.llm_engine import LLMEngine
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.pooling import bytes_vector
from mstar.logging_setup import start_logging
from mstar.models.vision.inputs import load_processor
from mstar.output.processor import RequestText, ends_in_engine
from mstar.prompt import chat_media
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
        self.tokenizer = self.engine.tokenizer
        self._next_id = 0
        self._vision_processor = None  # a vision model's processor, loaded at its first image

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
        ids = []
        results = {}
        texts = {}
        for prompt, p in zip(prompts, params, strict=True):
            rid = f"llm-{self._next_id}"
            self._next_id += 1
            try:
                self.engine.add_request(rid, prompt.token_ids, p, prompt.parts)
            except ValueError:  # a rejected request (bad schema, too long): none of them runs
                for added in ids:
                    self.engine.abort_request(added)
                raise
            ids.append(rid)
            results[rid] = GenerationResult(prompt_token_ids=list(prompt.token_ids))
            texts[rid] = RequestText(self.tokenizer, prompt.token_ids, p)
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                text = texts[out.request_id].to_text(out)
                if text is None:  # ended at a stop string; the engine's abort is on its way
                    continue
                if ends_in_engine(text, out):
                    self.engine.abort_request(out.request_id)
                r = results[out.request_id]
                r.text += text.new_text
                r.token_ids += text.new_token_ids
                if text.finished:
                    r.finish_reason = text.finish_reason
                    r.embedding = text.embedding
        self.engine.take_rejected()  # their outputs ended as "abort"; the server's answer is unused
        return [results[rid] for rid in ids]

