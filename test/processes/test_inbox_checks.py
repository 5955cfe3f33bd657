"""The inbox checks (``mstar.ipc.inbox_checks``), in process: what a secret holder could send that
crashed a receiver is dropped as invalid, what the instance's own processes send passes, and for
random well-formed messages of every type at every inbox, a receive never raises and whatever it
admits its consumer can use (a reload applies, a request's ids and images fit, a report renders).
The same forged frames against a served model: test_transport_serve.py."""

from __future__ import annotations

import dataclasses
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import zmq
from hypothesis import HealthCheck, given, settings
from wire_strategies import messages

from mstar.engine.request.outputs import RequestOutput, TokenLogprob
from mstar.ipc import messages as m
from mstar.ipc.inbox_checks import InboxBounds, Invalid, check
from mstar.ipc.parts import WireImage, WireTensor, from_wire, tensors_from_wire
from mstar.ipc.security import SocketSecurity
from mstar.ipc.settings_reload import apply_reloaded
from mstar.ipc.sockets import admit, push_socket
from mstar.models.speech.row_feed import RowFeed
from mstar.settings import WorkerSettings
from mstar.settings.reload import reloadable_values
from mstar.settings.wire import settings_from_json, settings_to_json

SETTINGS = WorkerSettings(num_workers=2, remote_workers=1, zmq_transport="tcp",
                          tensor_parallel_size=2)
VOCAB, MAX_LEN = 100, 64
WORKER = dataclasses.replace(InboxBounds.of(SETTINGS), vocab_size=VOCAB, max_model_len=MAX_LEN)
INBOXES = {  # the bounds each process's inbox runs with
    "worker": (m.TO_WORKER, WORKER),
    "conductor": (m.TO_CONDUCTOR, InboxBounds.of(SETTINGS)),
    "api server": (m.TO_API, InboxBounds(replicas=2)),
    "joining worker": (m.TO_JOINING_WORKER, InboxBounds.of(SETTINGS)),
    "talker node": (m.TO_TALKER_NODE, InboxBounds.of(SETTINGS)),
    "talker's worker": (m.FROM_TALKER_NODE, InboxBounds.of(SETTINGS)),
}


def request(ids: list[int], **params) -> m.AddRequest:
    return m.AddRequest("r-1", ids, m.SamplingParams(**params))


def test_a_reload_is_checked_through_the_settings_parser():
    check(m.ReloadSettings(reloadable_values(SETTINGS), SETTINGS.fingerprint()), WORKER)
    forged = [{"no_such_knob": 1}, {**reloadable_values(SETTINGS), "no_such_knob": 1},
              {**reloadable_values(SETTINGS), "log_level": "loud"},
              {**reloadable_values(SETTINGS), "request_timeout_s": -1},
              {**reloadable_values(SETTINGS), "model": "/etc"}]  # a restart-only knob
    for values in forged:
        with pytest.raises(Invalid, match="values"):
            check(m.ReloadSettings(values, "forged"), WORKER)


def test_a_request_is_checked_against_the_vocabulary_and_the_limits():
    check(request([1, VOCAB - 1], seed=2**64 - 1), WORKER)
    for ids in ([VOCAB], [1, 10**12], [-1]):
        with pytest.raises(Invalid, match="prompt_token_ids has token ids outside"):
            check(request(ids), WORKER)
    for msg, field in [(request([1] * (MAX_LEN + 1)), "prompt_token_ids"),
                       (request([1], seed=2**64), "seed"),
                       (request([1], stop=["x"] * 65), "stop")]:
        with pytest.raises(Invalid, match=field):
            check(msg, WORKER)
    with pytest.raises(Invalid, match="before the model is loaded"):
        check(request([1]), InboxBounds.of(SETTINGS))


def test_an_image_must_be_the_bytes_its_shape_says():
    good = WireImage("h", [1, 2], {"pixel_values": WireTensor("float32", [2, 3], bytes(24))})
    check(m.AddRequest("r", [1, 2, 3], m.SamplingParams(), [good]), WORKER)
    bad = [WireImage("h", [1, 2], {"p": WireTensor("float32", [2, 3], bytes(23))}),
           WireImage("h", [1, 2], {"p": WireTensor("complex", [1], bytes(8))}),
           WireImage("h", [2, 1], {"p": WireTensor("float32", [1], bytes(4))}),
           WireImage("h", [3], {"p": WireTensor("float32", [1], bytes(4))}),
           WireImage("h", [1], {"p": WireTensor("float32", [-1, -4], bytes(16))})]
    for image in bad:
        with pytest.raises(Invalid, match="parts.0"):
            check(m.AddRequest("r", [1, 2, 3], m.SamplingParams(), [image]), WORKER)


@pytest.mark.parametrize("msg", [
    m.WorkerStats(2, 0, 0, 0.0, 0), m.WorkerStats(0, -1, 0, 0.0, 0),
    m.WorkerStats(0, 0, 0, float("nan"), 0), m.TransportDrops("intruder", {"invalid": 1}),
    m.TransportDrops("worker 0", {"made up": 1}), m.RequestFailed("r", 200, "ok"),
    m.Ready("m", 64, 3, [], ["tcp://a:1"] * 3), m.Ready("m", 64, 2, [], ["x", "y"]),
    m.Liveness({5: "down"}), m.Outputs([RequestOutput("r", [1]), RequestOutput("s", [-1])]),
    m.Outputs([RequestOutput("r", [1], logprobs=[TokenLogprob(1, -0.5, [(2**32, -1.0)])])]),
    m.Outputs([RequestOutput("r", finish_reason="exploded")]),
    m.Outputs([RequestOutput("r", embedding=b"abc")]),
], ids=lambda msg: type(msg).__name__)
def test_reports_are_checked_against_the_replica_table(msg):
    with pytest.raises(Invalid):
        check(msg, InboxBounds(replicas=2))


def test_the_outputs_a_worker_sends_pass():
    check(m.Outputs([RequestOutput("r", [1, 2**32 - 1], True, "stop", 3, 2, num_cached_tokens=1),
                     RequestOutput("e", [], True, "stop", 3, embedding=bytes(8)),
                     RequestOutput("l", [4], logprobs=[TokenLogprob(4, -0.5, [(5, -1.0)])])]),
          InboxBounds(replicas=2))


def consume(msg: m.Message) -> None:
    """What each receiver does first with an admitted message's values."""
    if isinstance(msg, m.ReloadSettings):
        apply_reloaded(SETTINGS, msg, "test")
    elif isinstance(msg, m.AddRequest):
        assert all(0 <= t < VOCAB for t in msg.prompt_token_ids)
        for image in msg.parts:
            from_wire(image)
    elif isinstance(msg, m.TalkerAdd):  # the talker's process makes the request's feed
        RowFeed(*tensors_from_wire({"prompt": msg.prompt, "pad": msg.pad}).values())
    elif isinstance(msg, m.TalkerRows):  # ... and grows it
        RowFeed(torch.zeros(0, 1), torch.zeros(1)).append(
            tensors_from_wire({"rows": msg.rows})["rows"])
    elif isinstance(msg, m.SettingsSync):
        settings_from_json(msg.settings_json)
    elif isinstance(msg, m.Ready):  # the API server connects to every replica's address
        ctx = zmq.Context()
        for address in msg.worker_addresses:
            push_socket(ctx, address, SocketSecurity(1 << 20)).close(linger=0)
        ctx.term()
    elif isinstance(msg, m.TransportDrops | m.WorkerStats):
        from mstar.api_server.context.metrics import Metrics

        metrics = Metrics()
        metrics.update_workers({0: msg} if isinstance(msg, m.WorkerStats) else {})
        metrics.update_dropped_frames({msg.process: msg.counts}
                                      if isinstance(msg, m.TransportDrops) else {})


@pytest.mark.parametrize("inbox", INBOXES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                   HealthCheck.too_slow])
@given(msg=messages(SETTINGS))
def test_random_messages_are_admitted_only_when_their_receiver_can_use_them(inbox, msg):
    accepts, bounds = INBOXES[inbox]
    sock = SimpleNamespace(accepts=accepts, bounds=bounds, dropped=Counter(), logged_at={},
                           last_endpoint=b"tcp://test")
    frame = SimpleNamespace(buffer=memoryview(m.encode(msg)), get=lambda _: "peer")
    admitted = admit(sock, frame)
    assert (admitted is None) == (sum(sock.dropped.values()) == 1)
    if admitted is not None:
        consume(admitted)


def test_the_instance_own_settings_sync_passes():
    check(m.SettingsSync(settings_to_json(SETTINGS)), InboxBounds.of(SETTINGS))
    with pytest.raises(Invalid, match="settings_json"):
        check(m.SettingsSync('{"num_workers": "many"}'), InboxBounds.of(SETTINGS))
