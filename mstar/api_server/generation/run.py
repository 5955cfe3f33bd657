"""From a validated request to engine outputs: check limits, run n sub-requests.

Every route goes through ``run_requests``, which owns the request's lifetime in the workers: it
applies request_timeout_s, turns worker faults into APIError, and aborts whatever did not finish
(client gone, timeout, error) so its KV blocks are freed at once.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from mstar.api_server.context.caller import current_caller
from mstar.api_server.context.metrics import Metrics
from mstar.api_server.generation.engine_client import EngineClient
from mstar.api_server.generation.prompts import batch_field
from mstar.api_server.generation.unread import Pump, Unread
from mstar.api_server.http.deadline import seconds_left, timed_out
from mstar.api_server.http.errors import APIError
from mstar.engine.request.errors import RequestRejected
from mstar.engine.request.limits import SEED_LIMIT, check_request_fits
from mstar.engine.request.sampling_params import SamplingParams, StructuredOutput
from mstar.output.processor import TextOutput
from mstar.prompt.value import Prompt

# How often a non-streaming request checks that its client is still there: a check is one
# receive that does not wait, and 0.1 s leaves most of issue 35's 1 s bound (a client gone
# has its KV blocks freed within it) to the abort and a busy machine.
DISCONNECT_CHECK_S = 0.1


Job = tuple[Prompt, SamplingParams]  # one choice: its prompt and how to sample


def jobs_for(max_model_len: int, req: Any, prompts: list[Prompt], prompt_field: str,
             structured: StructuredOutput | None = None, lora: str | None = None) -> list[Job]:
    """Every choice of a request: prompt-major, n per prompt (choice index = prompt * n + i).
    ``lora``: the LoRA adapter its model name selects (None: the base model)."""
    return [(prompt, params) for k, prompt in enumerate(prompts)
            for params in sampling_params(max_model_len, req, prompt.num_tokens,
                                          batch_field(prompt_field, k, len(prompts)), structured,
                                          lora)]


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def sampling_params(max_model_len: int, req: Any, prompt_len: int, prompt_field: str = "prompt",
                    structured: StructuredOutput | None = None,
                    lora: str | None = None) -> list[SamplingParams]:
    """One SamplingParams per choice (n), validated by the engine's own class and limit rule.
    ``req``: a validated request's sampling fields (``openai.protocol.SamplingFields``)."""
    limit = max_model_len
    max_tokens = req.requested_max_tokens()
    if max_tokens is None:
        max_tokens = max(1, limit - prompt_len)
    try:
        check_request_fits(prompt_len, max_tokens, limit, prompt_field)
    except RequestRejected as exc:
        raise APIError(400, str(exc), exc.param) from exc
    if req.min_tokens > max_tokens:
        raise APIError(400, f"min_tokens ({req.min_tokens}) exceeds max_tokens ({max_tokens})",
                       "min_tokens")
    common = dict(
        max_tokens=max_tokens, temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
        min_p=req.min_p, repetition_penalty=req.repetition_penalty,
        presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
        logit_bias={int(k): v for k, v in (req.logit_bias or {}).items()},
        min_tokens=req.min_tokens, stop_token_ids=list(req.stop_token_ids or []),
        stop=req.stop_list(), ignore_eos=req.ignore_eos, logprobs=req.num_logprobs(),
        structured_output=structured, lora=lora)
    out = []
    for i in range(req.n):
        try:
            params = SamplingParams(
                **common, seed=None if req.seed is None else (req.seed + i) % SEED_LIMIT)
        except ValueError as exc:  # the API's own checks are meant to make this unreachable
            raise _field_error(exc) from exc
        out.append(params)
    return out


def _field_error(exc: ValueError) -> APIError:
    """SamplingParams' message, naming the request field rather than the engine's class."""
    match = re.match(r"invalid SamplingParams\.(\w+)=.*?: (.*)$", str(exc), re.S)
    if match is None:
        return APIError(400, str(exc))
    return APIError(400, f"invalid field '{match[1]}': {match[2]}", match[1])


async def first_output(outputs: AsyncIterator) -> Any:
    """Wait for the first output before answering a stream, so early failures keep their status."""
    try:
        return await outputs.__anext__()
    except BaseException:
        await outputs.aclose()
        raise


async def replay(first: tuple[int, TextOutput], outputs: AsyncIterator
                 ) -> AsyncIterator[tuple[int, TextOutput]]:
    """The first output (awaited before the response started), then the rest."""
    yield first
    async for item in outputs:
        yield item


async def run_requests(
    client: EngineClient, metrics: Metrics, timeout: float, max_unread_bytes: int,
    request_id: str, jobs: list[Job], is_disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncIterator[tuple[int, TextOutput]]:
    """Yield (choice index, text output) until every choice (job) finished or ``timeout``
    (request_timeout_s) passed. The engine's outputs are taken by a ``Pump`` as they are routed
    (``unread``): a slow reader is cut at the deadline, or once ``max_unread_bytes`` of output
    wait for it, and the workers' work is aborted then, not when the reader comes back."""
    ids = [f"{request_id}-{i}" for i in range(len(jobs))]
    index = {rid: i for i, rid in enumerate(ids)}
    started = time.perf_counter()
    last: dict[str, float] = {}
    unfinished = set(ids)
    caller = current_caller()  # the request's key: its quotas and metrics, its span
    num_prompt = sum(prompt.num_tokens for prompt, _ in jobs)
    metrics.prompt_tokens.inc(num_prompt)
    caller.prompt_tokens(num_prompt)
    deadline = started + seconds_left(timeout)  # counted from the request's admission

    def taken(item: TextOutput) -> None:
        now, rid = time.perf_counter(), item.request_id
        if item.finished:
            caller.finished(item.finish_reason)
        if item.new_token_ids:
            metrics.output_tokens.inc(len(item.new_token_ids))
            caller.output_tokens(len(item.new_token_ids))
            if rid in last:
                metrics.itl.observe(now - last[rid])
            else:
                metrics.ttft.observe(now - started)
            last[rid] = now

    unread = Unread(max_unread_bytes)
    pumping = Pump(unread, set(ids), deadline, lambda: timed_out(timeout), client.abort, taken)
    next_check = started + DISCONNECT_CHECK_S
    try:
        client.submit([(rid, prompt, p) for rid, (prompt, p) in zip(ids, jobs, strict=True)],
                      pumping)
        while unfinished:
            now = time.perf_counter()
            if deadline - now <= 0:  # a slow reader, when everything was generated in time
                raise timed_out(timeout)
            if is_disconnected is not None and now >= next_check:
                next_check = now + DISCONNECT_CHECK_S
                if await is_disconnected():
                    return
            # a stream (no check: its closing is seen at once) wakes only for its outputs, or for
            # the pump's error at the deadline
            wait = None if is_disconnected is None else min(deadline - now, DISCONNECT_CHECK_S)
            item = await unread.next(wait)
            if item is None:
                continue
            if item.finished:
                unfinished.discard(item.request_id)
            yield index[item.request_id], item
    finally:
        pumping.close()
        client.abort(sorted(unfinished))
        client.release(ids)
