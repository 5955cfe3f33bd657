"""``Generation``: what every route generates through. A route asks it for its request's prompts
(chat, completion, embedding: token ids checked against every limit, computed off the event loop)
and its choices' sampling parameters (``jobs``), and runs them in the workers (``run``, ``collect``).

Routes hold no engine client, tokenizer or settings bag: they hold this, and the read-only views
they need besides (``context.running.RunningSettings``, ``context.served.ServedModel``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

from mstar.api_server.context.metrics import Metrics
from mstar.api_server.context.running import RunningSettings
from mstar.api_server.context.served import ServedModel
from mstar.api_server.generation.audio_prompt import audio_chat_prompt
from mstar.api_server.generation.choice import Choice
from mstar.api_server.generation.engine_client import EngineClient
from mstar.api_server.generation.image_prompt import image_chat_prompt
from mstar.api_server.generation.prompts import batch_field, chat_prompt_ids, given_prompt_ids
from mstar.api_server.generation.run import Job, jobs_for, run_requests
from mstar.api_server.http.errors import APIError
from mstar.api_server.media.loader import ImageLoader
from mstar.api_server.media.parts import has_audio, message_dicts
from mstar.engine.request.sampling_params import StructuredOutput
from mstar.output.processor import TextOutput
from mstar.output.token_bytes import TokenBytes
from mstar.prompt.chat_media import has_media
from mstar.prompt.value import Prompt


class Generation:
    def __init__(self, client: EngineClient, tokenizer: Any, model: ServedModel,
                 running: RunningSettings, metrics: Metrics, processor: Any = None) -> None:
        self.tokenizer = tokenizer
        self.token_bytes = None if tokenizer is None else TokenBytes(tokenizer)  # logprobs
        self._client = client
        self._model = model
        self._running = running
        self._metrics = metrics
        self._processor = processor  # a vision model's transformers processor, else None
        # image fetching and decoding, and their bounds (a text model has none)
        self._images = None if processor is None else ImageLoader(running.settings)

    async def chat_prompt(self, req: Any, tools: list[dict] | None = None,
                          template_kwargs: dict[str, Any] | None = None) -> Prompt:
        """The prompt of a validated chat request (``openai.chat_protocol``). ``tools``: the
        OpenAI tool objects the model is shown (``tools.plan``); ``template_kwargs``: more
        chat-template arguments (``reasoning.plan``). A vision model's image request is rendered
        by its processor, its images the prompt's parts; an audio-in model's audio request likewise,
        its clips the parts."""
        settings, max_len = self._running.settings, self._model.max_model_len
        if self._processor is not None:
            messages = message_dicts(req.messages)
            if has_audio(messages):  # the gate let it through: the model takes audio
                return await audio_chat_prompt(self._processor, settings, max_len, messages)
            if has_media(messages):
                return await image_chat_prompt(self._processor, self._images, settings, max_len,
                                               messages)
        ids = await asyncio.to_thread(chat_prompt_ids, self.tokenizer, settings, max_len,
                                      req.messages, tools, template_kwargs or {})
        return Prompt(ids)

    async def given_prompts(self, prompts: list[str | list[int]], param: str,
                            pooled: bool = False) -> list[Prompt]:
        """Prompts given as text or token ids: a completion's ``prompt`` or an embedding's
        ``input`` (``pooled``); an error names ``param`` (or ``param.k`` in a batch)."""
        settings, max_len = self._running.settings, self._model.max_model_len

        def all_ids() -> list[Prompt]:
            return [Prompt(given_prompt_ids(self.tokenizer, settings.max_prompt_chars, max_len, p,
                                            batch_field(param, k, len(prompts)), pooled))
                    for k, p in enumerate(prompts)]

        return await asyncio.to_thread(all_ids)

    def jobs(self, req: Any, prompts: list[Prompt], prompt_field: str,
             structured: StructuredOutput | None = None) -> list[Job]:
        """Every choice of a request: prompt-major, n per prompt (see ``run.jobs_for``)."""
        if not self._model.generates:
            raise APIError(400, f"the served model {self._model.name} is a sequence classifier: "
                           "it generates nothing (use /v1/classify, /v1/score, /v1/rerank)",
                           "model")
        if "text" not in self._model.outputs:  # its graph emits audio only (CSM)
            raise APIError(400, f"the served model {self._model.name} makes no text: it speaks "
                           "(use /v1/audio/speech)", "model")
        lora = self._model.adapter_of(req.model)
        jobs = jobs_for(self._model.max_model_len, req, prompts, prompt_field, structured, lora)
        if lora is not None:
            self._metrics.lora_requests.labels(adapter=lora).inc(len(jobs))
        return jobs

    def run(self, request_id: str, jobs: list[Job],
            is_disconnected: Callable[[], Awaitable[bool]] | None = None
            ) -> AsyncIterator[tuple[int, TextOutput]]:
        """(choice index, text output) until every choice finished (see ``run.run_requests``)."""
        settings = self._running.settings
        return run_requests(self._client, self._metrics, settings.request_timeout_s,
                            int(settings.max_unread_output_kb * 1024), request_id, jobs,
                            is_disconnected)

    async def collect(self, request_id: str, jobs: list[Job],
                      is_disconnected: Callable[[], Awaitable[bool]]) -> list[Choice]:
        """Run every choice to the end for a non-streaming response."""
        choices = [Choice() for _ in jobs]
        async with aclosing(self.run(request_id, jobs, is_disconnected)) as outputs:
            async for i, out in outputs:
                choices[i].add(out)
        return choices
