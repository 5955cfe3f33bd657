"""The API server in process on a stub engine: every choice gets up to 3 tokens at once.

For tests of the HTTP layer (fields, errors, the published schema) that need no model. A stub
model that speaks (``app_on(..., outputs=SPEAKS, voices=STUB_VOICES)``) answers a request whose
``speaker`` is set with ``STUB_SAMPLES`` samples of audio (``stub_audio``) beside each token.
"""

from __future__ import annotations

import json

import numpy as np

from mstar.api_server.generation.replica_health import ReplicaHealth
from mstar.api_server.generation.routing import Router
from mstar.engine.request.outputs import AudioChunk, TokenLogprob
from mstar.ipc import messages as m
from mstar.output.processor import TextOutput

STUB_MODEL = "stub-model"
STUB_MAX_MODEL_LEN = 1024  # room for the tool descriptions a chat template is given
STUB_TOKEN = 5
MAX_STUB_TOKENS = 3
STUB_VECTOR = np.array([3.0, 0.0, 4.0], dtype="<f4").tobytes()  # an embedding: 0.6, 0, 0.8
STUB_LABELS = ("relevant",)  # a classifier's (``stub_app(..., labels=STUB_LABELS)``)
SPEAKS = ("text", "audio")  # what a speaking stub model's graph emits
STUB_VOICES = ("ethan", "chelsie")
STUB_RATE = 24_000
STUB_SAMPLES = 5  # audio samples per token of a spoken reply


def stub_audio(k: int) -> AudioChunk:
    """The audio beside a spoken reply's token ``k``: a ramp, distinct per token."""
    ramp = (np.arange(STUB_SAMPLES, dtype="<f4") + k * STUB_SAMPLES) / 20.0 - 0.3
    return AudioChunk(ramp.astype("<f4").tobytes(), STUB_RATE)


def stub_logits(prompt_ids: list[int]) -> bytes:
    """A one-label classifier's logit: the prompt's length (longer scores higher)."""
    return np.array([len(prompt_ids) / 10.0], dtype="<f4").tobytes()


class StubEngine:
    """Stands in for EngineClient; ``submitted`` keeps every (request id, prompt ids, params).

    Each sub-request crosses the wire encoding a worker decodes (which validates it again), so a
    request the API lets through that would fail in a worker fails here.
    """

    def __init__(self) -> None:
        self.failure = None
        self.stats: dict = {}
        self.replicas = ReplicaHealth(1)
        self.router = Router("least_loaded", 1, 1)  # /metrics reads its counts
        self.submitted: list = []

    def submit(self, requests: list, sink) -> None:
        for rid, prompt, params in requests:
            sent = m.decode(m.encode(m.AddRequest.of(rid, prompt, params)))
            assert sent.params == params
            ids = prompt.token_ids
            self.submitted.append((rid, ids, params))
            if params.pooling is not None:
                vector = stub_logits(ids) if params.pooling == "classify" else STUB_VECTOR
                sink.put_nowait(TextOutput(rid, finished=True, finish_reason="stop",
                                            num_prompt_tokens=len(ids), embedding=vector))
                continue
            count = min(params.max_tokens, MAX_STUB_TOKENS)
            for k in range(count):
                logprobs = None
                if params.logprobs is not None:
                    top = [(STUB_TOKEN, -0.5)] * params.logprobs
                    logprobs = [TokenLogprob(STUB_TOKEN, -0.5, top)]
                last = k == count - 1
                sink.put_nowait(TextOutput(
                    rid, [STUB_TOKEN], finished=last, finish_reason="length" if last else None,
                    num_prompt_tokens=len(ids), num_output_tokens=k + 1, logprobs=logprobs,
                    new_text="a", new_audio=stub_audio(k) if params.speaker else None))

    def release(self, request_ids: list) -> None:
        pass

    def abort(self, request_ids: list) -> None:
        pass

    def dropped_frames(self) -> dict:
        return {"api_server": {"undecodable": 1}}


def stub_app(tokenizer, engine=None, **settings):
    """(the ASGI app, its engine: a new StubEngine unless given) for these settings."""
    engine = StubEngine() if engine is None else engine
    return app_on(engine, tokenizer, **settings), engine


def app_on(client, tokenizer, model_name=STUB_MODEL, max_model_len=STUB_MAX_MODEL_LEN,
           labels=(), generates=True, speech=None, modalities=("text",), processor=None,
           outputs=("text",), voices=(), **settings):
    """The ASGI app of an API server whose engine client is ``client``, with these settings
    (``labels``, ``generates``: the served model's classifier head, see ``ServedModel``;
    ``speech``: a speech model's ``SpeechModel``, for the audio routes; ``modalities`` and
    ``processor``: what the served model takes, and its transformers processor; ``outputs``
    and ``voices``: what its graph emits and, speaking, its voices)."""
    from mstar.api_server.app import build_app
    from mstar.api_server.context.admission import Admission
    from mstar.api_server.context.metrics import Metrics
    from mstar.api_server.context.running import RunningSettings
    from mstar.api_server.context.served import ServedModel
    from mstar.settings import WorkerSettings

    running = RunningSettings(WorkerSettings(**settings))
    model = ServedModel(model_name, max_model_len, running, tuple(modalities), labels=labels,
                        generates=generates, outputs=tuple(outputs), voices=tuple(voices))
    return build_app(client, tokenizer, running, model, Admission(lambda: client.failure),
                     Metrics(), processor, speech)


def sse_events(resp) -> list[tuple[str, dict]]:
    """(event name, data) of each typed server-sent event of a response (Responses, Messages)."""
    out = []
    for block in resp.text.strip().split("\n\n"):
        kind, data = block.split("\n")
        out.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out
