"""Messages between the API server, the conductor and the workers: typed msgspec structs.

Each message is a tagged struct; ``encode``/``decode`` turn it into msgpack and back, validating
every field on the way in (a malformed message is a ``msgspec.ValidationError``, never a dict).
The request path is API server <-> worker: the API server places each request on a replica
(``AddRequest``, ``AbortRequests`` straight to its rank 0) and the worker sends its outputs back,
one ``Outputs`` message per engine step. The conductor keeps the life cycle (start-up, settings
fingerprints, reload, liveness, shutdown) and never sits on the request path.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec

from mstar.engine.request.outputs import RequestOutput
from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc.parts import WirePart, WireTensor, from_wire, to_wire
from mstar.prompt.value import Prompt

TRACEPARENT_MAX = 256


class _Message(msgspec.Struct, tag=True, array_like=True):
    pass


# API server -> worker (rank 0 of a replica)
class AddRequest(_Message):
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    parts: list[WirePart] = []  # the prompt's media parts (images, audio), typed, in order
    # the scheduler's class (``mstar.engine.schedule.priority``: 0 low, 1 normal, 2 high)
    priority: Annotated[int, msgspec.Meta(ge=0, le=2)] = 1
    # W3C trace context of the API server's span ("" when not tracing; 55 characters in version 00)
    traceparent: Annotated[str, msgspec.Meta(max_length=TRACEPARENT_MAX)] = ""

    @classmethod
    def of(cls, request_id: str, prompt: Prompt, params: SamplingParams, priority: int = 1,
           traceparent: str = "") -> AddRequest:
        """The message that carries ``prompt`` (its token ids and media parts) to a worker."""
        return cls(request_id, list(prompt.token_ids), params,
                   [to_wire(part) for part in prompt.parts], priority, traceparent)

    def prompt(self) -> Prompt:
        """The prompt this message carries, its parts' tensors rebuilt (loads torch)."""
        return Prompt(self.prompt_token_ids, tuple(from_wire(w) for w in self.parts))


class AbortRequests(_Message):
    request_ids: list[str]


class LoraUpdate(_Message):
    """Load (``path`` set) or unload (``path`` empty) a LoRA adapter at run time, sent to every
    replica (/v1/load_lora_adapter, /v1/unload_lora_adapter); each answers ``LoraUpdated``."""

    update_id: str
    name: str
    path: str = ""


# API server -> conductor -> worker
class Shutdown(_Message):
    reason: str = ""


class ReloadSettings(_Message):
    """SIGHUP: the reloadable knobs' new values (``mstar.settings.reload.reloadable_values``) and
    the fingerprint of the settings they make, which every process then runs with."""

    values: dict[str, Any]
    fingerprint: str


# worker -> conductor
class SetupDone(_Message):
    """The ready handshake: a worker's engine is loaded; the conductor checks the fingerprint."""

    worker: int
    pid: int
    fingerprint: str
    model_name: str
    max_model_len: int
    seconds: float
    rank: int = 0  # the process's rank in its replica's tensor-parallel group


class Join(_Message):
    """A replica started on another host (``mstar worker``) asks for the conductor's settings;
    ``address`` is where its command socket listens."""

    worker: int
    pid: int
    address: str
    fingerprint: str


# conductor -> worker
class SettingsSync(_Message):
    """The conductor's settings (JSON), which a joining replica runs with."""

    settings_json: str


# worker -> API server
class Outputs(_Message):
    outputs: list[RequestOutput]


class RequestFailed(_Message):
    request_id: str
    status: int
    message: str
    param: str | None = None


class LoraUpdated(_Message):
    """A replica applied a ``LoraUpdate`` (status 200) or refused it (the HTTP status and why)."""

    update_id: str
    worker: int
    status: int
    message: str = ""


class WorkerStats(_Message):
    worker: int
    running: int
    waiting: int
    kv_cache_usage: float
    preemptions: int  # so far
    encoder_cache_hits: int = 0  # media parts (images, audio) whose encoder output was cached
    encoder_cache_misses: int = 0  # ... and parts encoded
    encoder_seconds: float = 0.0  # time in the encoder nodes so far
    # speculative decoding, totals so far ("" = off): draft tokens proposed, accepted, and the
    # seconds spent proposing and in the forwards that verified drafts
    spec_method: str = ""
    spec_proposed: int = 0
    spec_accepted: int = 0
    spec_propose_s: float = 0.0
    spec_verify_s: float = 0.0
    lora_loads: int = 0  # LoRA adapters read so far (start and run time)
    lora_evictions: int = 0  # ... and moved out of a device slot for another
    codec_requests: int = 0  # requests whose codec state the codec node holds (speech out)


# a remote replica's ``mstar worker`` -> conductor, every MSTAR_LIVENESS_INTERVAL_S / 4
class Alive(_Message):
    worker: int
    pid: int


# conductor -> API server
class Ready(_Message):
    """Every replica is up; ``worker_addresses[i]`` is replica i's command socket (its rank 0),
    where the API server sends that replica's requests."""

    model_name: str
    max_model_len: int
    num_workers: int
    worker_pids: list[int] = []
    worker_addresses: list[str] = []


class Fatal(_Message):
    """The serving stack is going down: every pending request fails with this message."""

    message: str


# conductor -> API server, whenever the set of replicas that missed their interval changes
# (``mstar.conductor.liveness``)
class Liveness(_Message):
    """``down``: replica index -> why it is down (it names the replica); empty once all are up."""

    down: dict[int, str]


# conductor or worker -> API server
class TransportDrops(_Message):
    """Frames a process's inbox dropped so far, by reason (``mstar.ipc.sockets``): the API
    server shows them in /metrics."""

    process: str
    counts: dict[str, int]


# worker <-> its encoder-node process (MSTAR_ENCODER_PLACEMENT, ``mstar.worker.encoder_node``)
class EncodeRequest(_Message):
    """Run the node on one part's encoder input; answered by ``EncodedOutput`` of ``call``."""

    call: int
    tensors: dict[str, WireTensor]


class EncodedOutput(_Message):
    call: int
    output: WireTensor  # the node's output on the call's input


class NodeReady(_Message):
    """A node process (encoder or codec) loaded its node and listens."""

    node: str
    sample_rate: int = 0  # a codec node's: its audio's samples per second


# worker <-> its codec-node process (MSTAR_ENCODER_PLACEMENT, ``mstar.worker.codec_node``)
class RequestFrames(msgspec.Struct, array_like=True):
    """One request's new frames (codes, one list per frame); ``last``: the frames' source
    finished (the leftover goes out as a shorter chunk, and the request's codec state is
    freed)."""

    request_id: str
    frames: list[list[int]]
    last: bool = False


class CodecFrames(_Message):
    """A step's frames for the codec node, by request. Answered by ``CodecAudio`` of ``call``."""

    call: int
    requests: list[RequestFrames]


class CodecForget(_Message):
    """Aborted requests: their codec state is freed. Answered by ``CodecAudio`` of ``call``."""

    call: int
    request_ids: list[str]


class CodecAudio(_Message):
    call: int
    # per request of the call, in its order: the audio chunks it made ready, each mono float32
    # ("<f4") samples (a forget's: none)
    chunks: list[list[bytes]]
    held: int  # requests whose codec state the node holds after the call


# worker <-> its talker process (MSTAR_ENCODER_PLACEMENT talker=process: mstar.worker.talker_node)
class TalkerAdd(_Message):
    """A spoken request's talker request: its feed's prefill rows [T, H] and ``pad`` row [H]
    (``RowFeed``), and its sampling params; its step rows follow as ``TalkerRows``."""

    request_id: str
    prompt: WireTensor
    pad: WireTensor
    params: SamplingParams


class TalkerRows(_Message):
    """The rows [n, H] the request's feed grew since the last send (n may be 0), in step order,
    and whether the feed is finished (no rows follow)."""

    request_id: str
    rows: WireTensor
    finished: bool = False


class TalkerAbort(_Message):
    request_id: str  # its work stops and its blocks go back; unknown ids are ignored


class TalkerOutputs(_Message):
    """One talker step's outputs (frames, finish), and its engine's load after it."""

    outputs: list[RequestOutput]
    running: int
    waiting: int
    free_blocks: int
    preemptions: int


class TalkerReady(_Message):
    """The talker's engine is built: what the chain checks admission against."""

    device: str
    dtype: str
    max_model_len: int
    num_blocks: int
    block_size: int


Message = Union[  # noqa: UP007 - msgspec needs a Union object here
    AddRequest, AbortRequests, Shutdown, ReloadSettings, SetupDone, Join, SettingsSync,
    Outputs, RequestFailed, LoraUpdate, LoraUpdated,
    WorkerStats, Ready, Fatal, TransportDrops, Alive, Liveness,
    EncodeRequest, EncodedOutput, NodeReady, CodecFrames, CodecForget, CodecAudio,
    TalkerAdd, TalkerRows, TalkerAbort, TalkerOutputs, TalkerReady,
]

# What each inbox accepts; any other message arriving there is dropped (``mstar.ipc.sockets``).
TO_API = (Outputs, RequestFailed, WorkerStats, Ready, Fatal, TransportDrops, Liveness, LoraUpdated)
TO_CONDUCTOR = (Shutdown, ReloadSettings, SetupDone, Join, Alive)
TO_WORKER = (AddRequest, AbortRequests, Shutdown, ReloadSettings, LoraUpdate)
TO_JOINING_WORKER = (SettingsSync,)
TO_ENCODER_NODE = (EncodeRequest, Shutdown)
FROM_ENCODER_NODE = (EncodedOutput, NodeReady)
TO_CODEC_NODE = (CodecFrames, CodecForget, Shutdown)
FROM_CODEC_NODE = (CodecAudio, NodeReady)
TO_TALKER_NODE = (TalkerAdd, TalkerRows, TalkerAbort, Shutdown)
FROM_TALKER_NODE = (TalkerOutputs, TalkerReady)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message)


def encode(msg: Message) -> bytes:
    """msgpack bytes of one message; raises (OverflowError, TypeError) before anything is sent."""
    return _encoder.encode(msg)


def decode(data: bytes) -> Message:
    return _decoder.decode(data)
