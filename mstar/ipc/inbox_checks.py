"""What a decoded message may carry, checked at its inbox before anyone acts on it.

Decoding (``mstar.ipc.messages``) proves a frame is a well-typed message; it does not prove that
its values fit this instance: a knob name the settings do not know, a token id past the model's
vocabulary, a replica index past the table, a count past a limit. Each message type has one check
here (``CHECKS``); ``mstar.ipc.sockets.admit`` runs it on every frame, and a message that fails is
dropped and counted as ``invalid`` like any other bad frame: nothing it carries reaches the
engine, the conductor's tables or the API server's routing.

A check raises ``Invalid`` (naming the field) and returns nothing: it reads the message and the
inbox's ``InboxBounds`` only. Every process that holds the cluster secret may still send any
message its peers obey (a shutdown, a reload of valid values); these checks keep such a message
from crashing the receiver, not from being obeyed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mstar.engine.request.limits import SEED_LIMIT
from mstar.ipc import messages as m
from mstar.ipc.check_rules import (
    MAX_ID_CHARS,
    MAX_TEXT_CHARS,
    Invalid,
    address,
    amount,
    count,
    member,
    most,
    text,
    token_ids,
)
from mstar.ipc.node_checks import NODE_CHECKS
from mstar.ipc.part_checks import check_part
from mstar.ipc.talker_node_checks import TALKER_NODE_CHECKS
from mstar.settings.reload import reloadable_values, with_values
from mstar.settings.wire import settings_from_json

if TYPE_CHECKING:
    from mstar.engine.request.outputs import RequestOutput
    from mstar.settings import WorkerSettings

# Why an inbox drops a frame: the label values of mstar_transport_dropped_frames{reason=...}.
UNDECODABLE, UNEXPECTED_TYPE, INVALID = "undecodable", "unexpected_type", "invalid"
DROP_REASONS = (UNDECODABLE, UNEXPECTED_TYPE, INVALID)

FINISH_REASONS = (None, "stop", "length", "abort")
# Output token ids: the tokenizer takes them as u32 (the API server does not know the model's
# vocabulary; an id past the tokenizer's decodes to nothing, ``mstar.output``).
TOKEN_ID_LIMIT = 2**32


@dataclass(frozen=True)
class InboxBounds:
    """What an inbox checks messages against. ``vocab_size`` and ``max_model_len`` are the
    worker's model's, known once it is loaded (0 until then: no request is admitted)."""

    replicas: int  # replica indices are below it
    ranks: int = 1  # rank indices (tensor-parallel group) are below it
    remote: range = range(0)  # the replicas that join from other hosts
    settings: WorkerSettings | None = None  # reloads are parsed against these
    vocab_size: int = 0
    max_model_len: int = 0

    @classmethod
    def of(cls, settings: WorkerSettings) -> InboxBounds:
        n = settings.num_workers
        return cls(n, settings.tensor_parallel_size, range(n - settings.remote_workers, n),
                   settings)


def check(msg: m.Message, bounds: InboxBounds) -> None:
    """Invalid unless ``msg`` fits ``bounds`` (every message type has its check)."""
    CHECKS[type(msg)](msg, bounds)


# -- API server -> worker ---------------------------------------------------------------------------

def check_add_request(msg: m.AddRequest, bounds: InboxBounds) -> None:
    if not bounds.vocab_size:
        raise Invalid("AddRequest before the model is loaded")
    text(msg.request_id, "request_id", MAX_ID_CHARS)
    most(msg.prompt_token_ids, bounds.max_model_len, "prompt_token_ids")
    token_ids(msg.prompt_token_ids, bounds.vocab_size, "prompt_token_ids")
    params = msg.params
    if params.seed is not None:
        member(params.seed, range(SEED_LIMIT), "params.seed")
    most(params.stop, bounds.settings.max_stop_strings, "params.stop")
    most(params.logit_bias, bounds.settings.max_logit_bias_entries, "params.logit_bias")
    most(params.stop_token_ids, bounds.vocab_size, "params.stop_token_ids")
    if params.lora is not None:
        text(params.lora, "params.lora", MAX_ID_CHARS)
    most(msg.parts, len(msg.prompt_token_ids), "parts")
    for i, part in enumerate(msg.parts):
        check_part(part, len(msg.prompt_token_ids), f"parts.{i}")


def check_abort(msg: m.AbortRequests, bounds: InboxBounds) -> None:
    for rid in msg.request_ids:
        text(rid, "request_ids", MAX_ID_CHARS)


def check_lora_update(msg: m.LoraUpdate, bounds: InboxBounds) -> None:
    text(msg.update_id, "update_id", MAX_ID_CHARS)
    text(msg.name, "name", MAX_ID_CHARS)
    text(msg.path, "path", MAX_TEXT_CHARS)


def check_lora_updated(msg: m.LoraUpdated, bounds: InboxBounds) -> None:
    text(msg.update_id, "update_id", MAX_ID_CHARS)
    member(msg.worker, range(bounds.replicas), "worker")
    member(msg.status, range(100, 600), "status")
    text(msg.message, "message", MAX_TEXT_CHARS)


# -- control ----------------------------------------------------------------------------------------

def check_shutdown(msg: m.Shutdown, bounds: InboxBounds) -> None:
    text(msg.reason, "reason", MAX_TEXT_CHARS)


def check_reload(msg: m.ReloadSettings, bounds: InboxBounds) -> None:
    """Exactly the reloadable knobs (the API server sends every one), with values the settings
    parser takes: applying it can then not fail, in whichever process."""
    text(msg.fingerprint, "fingerprint")
    if bounds.settings is None:
        raise Invalid("this process takes no reload")
    expected = set(reloadable_values(bounds.settings))
    if set(msg.values) != expected:
        wrong = sorted(set(msg.values) ^ expected)[:5]
        raise Invalid(f"values must name exactly the reloadable knobs; differs in {wrong}")
    try:
        with_values(bounds.settings, msg.values)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise Invalid(f"values: {exc}") from None


def check_setup_done(msg: m.SetupDone, bounds: InboxBounds) -> None:
    member(msg.worker, range(bounds.replicas), "worker")
    member(msg.rank, range(bounds.ranks), "rank")
    count(msg.pid, "pid")
    member(msg.max_model_len, range(1, 2**31), "max_model_len")
    amount(msg.seconds, "seconds")
    text(msg.fingerprint, "fingerprint")
    text(msg.model_name, "model_name")


def check_join(msg: m.Join, bounds: InboxBounds) -> None:
    member(msg.worker, bounds.remote, "worker")
    count(msg.pid, "pid")
    address(msg.address, "address")
    text(msg.fingerprint, "fingerprint")


def check_alive(msg: m.Alive, bounds: InboxBounds) -> None:
    member(msg.worker, bounds.remote, "worker")
    count(msg.pid, "pid")


def check_settings_sync(msg: m.SettingsSync, bounds: InboxBounds) -> None:
    try:
        settings_from_json(msg.settings_json)
    except (ValueError, TypeError) as exc:
        raise Invalid(f"settings_json: {exc}") from None


# -- worker or conductor -> API server --------------------------------------------------------------

def check_outputs(msg: m.Outputs, bounds: InboxBounds) -> None:
    """The hottest message (one per engine step): one cheap pass over all outputs; only when it
    fails are they taken apart, rule by rule, to name the field."""
    outs = msg.outputs
    plain = all(len(o.request_id) <= MAX_ID_CHARS and o.finish_reason in FINISH_REASONS
                and o.num_prompt_tokens >= 0 and o.num_output_tokens >= 0
                and o.num_cached_tokens >= 0 and o.logprobs is None and o.embedding is None
                and o.no_speech_prob is None for o in outs)
    ids = list(itertools.chain.from_iterable([o.new_token_ids for o in outs]))
    if not (plain and (not ids or (min(ids) >= 0 and max(ids) < TOKEN_ID_LIMIT))):
        for out in outs:
            _check_output(out)


def check_talker_outputs(msg: m.TalkerOutputs, bounds: InboxBounds) -> None:
    """A placed talker's step: its outputs as a worker's, its load as counts."""
    check_outputs(m.Outputs(msg.outputs), bounds)
    for name in ("running", "waiting", "free_blocks", "preemptions"):
        count(getattr(msg, name), name)


def _check_output(out: RequestOutput) -> None:
    text(out.request_id, "outputs.request_id", MAX_ID_CHARS)
    token_ids(out.new_token_ids, TOKEN_ID_LIMIT, "outputs.new_token_ids")
    member(out.finish_reason, FINISH_REASONS, "outputs.finish_reason")
    for name in ("num_prompt_tokens", "num_output_tokens", "num_cached_tokens"):
        count(getattr(out, name), f"outputs.{name}")
    if out.embedding is not None and len(out.embedding) % 4:
        raise Invalid("outputs.embedding is not a whole number of float32 values")
    if out.no_speech_prob is not None and not 0.0 <= out.no_speech_prob <= 1.0:
        raise Invalid("outputs.no_speech_prob is not a probability")
    for lp in out.logprobs or ():
        token_ids([lp.token_id, *(t for t, _ in lp.top)], TOKEN_ID_LIMIT, "outputs.logprobs")


def check_request_failed(msg: m.RequestFailed, bounds: InboxBounds) -> None:
    text(msg.request_id, "request_id", MAX_ID_CHARS)
    member(msg.status, range(400, 600), "status")
    text(msg.message, "message", MAX_TEXT_CHARS)
    text(msg.param or "", "param")


def check_worker_stats(msg: m.WorkerStats, bounds: InboxBounds) -> None:
    member(msg.worker, range(bounds.replicas), "worker")
    for name in ("running", "waiting", "preemptions", "encoder_cache_hits",
                 "encoder_cache_misses", "spec_proposed", "spec_accepted", "lora_loads",
                 "lora_evictions", "codec_requests"):
        count(getattr(msg, name), name)
    amount(msg.kv_cache_usage, "kv_cache_usage", 1.0)
    for name in ("encoder_seconds", "spec_propose_s", "spec_verify_s"):
        amount(getattr(msg, name), name)
    text(msg.spec_method, "spec_method", 64)


def check_ready(msg: m.Ready, bounds: InboxBounds) -> None:
    member(msg.num_workers, (bounds.replicas,), "num_workers")
    if len(msg.worker_addresses) != bounds.replicas:
        raise Invalid(f"worker_addresses has {len(msg.worker_addresses)} entries, not "
                      f"one per replica ({bounds.replicas})")
    for each in msg.worker_addresses:
        address(each, "worker_addresses", ("tcp://", "ipc://"))
    member(msg.max_model_len, range(1, 2**31), "max_model_len")
    text(msg.model_name, "model_name")
    for pid in msg.worker_pids:
        count(pid, "worker_pids")


def check_fatal(msg: m.Fatal, bounds: InboxBounds) -> None:
    text(msg.message, "message", MAX_TEXT_CHARS)


def check_drops(msg: m.TransportDrops, bounds: InboxBounds) -> None:
    """Only the instance's processes and reasons: each becomes a metric series."""
    processes = ("conductor", *(f"worker {i}" for i in range(bounds.replicas)))
    member(msg.process, processes, "process")
    for reason, frames in msg.counts.items():
        member(reason, DROP_REASONS, "counts")
        count(frames, "counts")


def check_liveness(msg: m.Liveness, bounds: InboxBounds) -> None:
    for worker, reason in msg.down.items():
        member(worker, range(bounds.replicas), "down")
        text(reason, "down", MAX_TEXT_CHARS)


CHECKS: dict[type, Callable[[Any, InboxBounds], None]] = {
    m.AddRequest: check_add_request,
    m.AbortRequests: check_abort,
    m.Shutdown: check_shutdown,
    m.ReloadSettings: check_reload,
    m.SetupDone: check_setup_done,
    m.Join: check_join,
    m.Alive: check_alive,
    m.SettingsSync: check_settings_sync,
    m.Outputs: check_outputs,
    m.RequestFailed: check_request_failed,
    m.WorkerStats: check_worker_stats,
    m.Ready: check_ready,
    m.Fatal: check_fatal,
    m.TransportDrops: check_drops,
    m.Liveness: check_liveness,
    **NODE_CHECKS,
    **TALKER_NODE_CHECKS,
    m.TalkerOutputs: check_talker_outputs,
    m.LoraUpdate: check_lora_update,
    m.LoraUpdated: check_lora_updated,
}

